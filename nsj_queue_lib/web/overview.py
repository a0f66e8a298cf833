"""A queue's statistics: its backlog, what settled in the last hour, the same per processo,
and its live workers.

Built from the inspection store's bounded queries only: ``depth`` reads the
partial indexes of the waiting and running rows, ``recent`` the last hour of
``idx_data_hora``, ``running_by_worker`` the running rows, ``live_workers`` the
small workers table. Nothing here counts the table's history, which purge
bounds but which can still be millions of rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.db.inspection import RATE_WINDOW, RECENT_BUCKET, RECENT_WINDOW, as_utc

BUCKETS = RECENT_WINDOW // RECENT_BUCKET
FAILED = (model.FALHA, model.FALHA_PROCESSANDO)
WAITING = (model.PENDENTE, model.AGENDADA)

Rows = Sequence[Mapping[str, Any]]


def queue_stats(
    table: str,
    depth: Rows,
    recent: Rows,
    workers: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """The statistics the API's ``/queues/{queue}/stats`` answers and the overview shows.
    ``workers``: ``worker_rows``' (None: the queue has no workers table)."""
    # What the depth query counts ('aguardando' waits for its parents, not for a worker).
    waiting = dict.fromkeys((model.PENDENTE, model.AGENDADA, model.PROCESSANDO), 0)
    oldest: float | None = None
    for row in depth:
        waiting[row["status"]] = waiting.get(row["status"], 0) + row["tasks"]
        oldest = _older(oldest, row["oldest_ready_seconds"])
    settled = {s: 0 for s in model.STATUSES if s not in model.ACTIVE_STATUSES}
    series = [
        {"minutes_ago": (BUCKETS - i) * RECENT_BUCKET // 60, "done": 0, "failed": 0}
        for i in range(BUCKETS)
    ]
    for row in _in_window(recent):
        settled[row["status"]] = settled.get(row["status"], 0) + row["tasks"]
        point = series[BUCKETS - 1 - row["bucket"]]
        if row["status"] in FAILED:
            point["failed"] += row["tasks"]
        elif not row["dead"]:  # a dead letter handled is no work done
            point["done"] += row["tasks"]
    return {
        "queue": table,
        "waiting": waiting,
        "oldest_ready_seconds": oldest,
        "last_hour": settled,
        "series": series,
        "bucket_seconds": RECENT_BUCKET,
        "rate_window_seconds": RATE_WINDOW,
        "processos": processo_rows(depth, recent, workers),
        "workers": workers,
    }


def processo_rows(
    depth: Rows, recent: Rows, workers: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """Per processo with work ahead or settled in the last hour: tasks ``waiting``
    ('pendente', 'agendada') and ``running``, the oldest ready one's age, the attempts
    done, failed and the dead letters settled in the last hour, ``done_per_minute`` over
    the last RATE_WINDOW seconds, and how many live ``workers`` claim it (None: unknown)."""
    rows: dict[str, dict[str, Any]] = {}

    def row(processo: str) -> dict[str, Any]:
        return rows.setdefault(processo, _empty(processo, workers))

    for entry in depth:
        counts = row(entry["processo"])
        counts["waiting" if entry["status"] in WAITING else "running"] += entry["tasks"]
        counts["oldest_ready_seconds"] = _older(
            counts["oldest_ready_seconds"], entry["oldest_ready_seconds"]
        )
    done_recently: dict[str, int] = {}
    for entry in _in_window(recent):
        counts = row(entry["processo"])
        if entry["dead"]:
            counts["dead_letters_last_hour"] += entry["tasks"]
        elif entry["status"] in FAILED:
            counts["failed_last_hour"] += entry["tasks"]
        elif entry["status"] == model.SUCESSO:
            counts["done_last_hour"] += entry["tasks"]
            done = done_recently.get(entry["processo"], 0) + entry["finished_recently"]
            done_recently[entry["processo"]] = done
    for processo, done in done_recently.items():
        rows[processo]["done_per_minute"] = round(done * 60 / RATE_WINDOW, 1)
    return [rows[p] for p in sorted(rows)]


def _empty(processo: str, workers: list[dict[str, Any]] | None) -> dict[str, Any]:
    claiming = None
    if workers is not None:
        claiming = sum(1 for w in workers if w["processos"] is None or processo in w["processos"])
    return {
        "processo": processo,
        "waiting": 0,
        "running": 0,
        "oldest_ready_seconds": None,
        "done_last_hour": 0,
        "failed_last_hour": 0,
        "dead_letters_last_hour": 0,
        "done_per_minute": 0.0,
        "workers": claiming,
    }


def worker_rows(
    live: Rows | None, running: Mapping[str | None, int]
) -> list[dict[str, Any]] | None:
    """The live workers (``live_workers``' rows, None: no workers table) as the API shows
    them: ``processos`` a list (None: every processo), times ISO 8601, and ``running``
    (the attempts it runs now)."""
    if live is None:
        return None
    return [
        {
            "worker": w["worker"],
            "processos": None if w["processos"] is None else json.loads(w["processos"]),
            "started_at": _iso(w["started_at"]),
            "seen_at": _iso(w["seen_at"]),
            "running": running.get(w["worker"], 0),
        }
        for w in live
    ]


def _iso(epoch: Any) -> str | None:
    moment = as_utc(epoch)
    return None if moment is None else moment.isoformat()


def _in_window(recent: Rows) -> list[Mapping[str, Any]]:
    # A negative bucket is due in the future (a cancelled scheduled task); BUCKETS is the
    # window's very edge.
    return [r for r in recent if 0 <= r["bucket"] < BUCKETS]


def _older(oldest: float | None, seconds: float | None) -> float | None:
    if seconds is None:
        return oldest
    return max(oldest or 0.0, seconds)
