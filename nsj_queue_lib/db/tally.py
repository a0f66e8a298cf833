"""Counts of a queue's finished attempts, kept so that ``nsjq status`` does not read the
whole history (issue 39, item 3; docs/internals/storage.md, "Counters").

The tally service (runtime/tally.py) folds the queue table's attempts in order of id into
``<queue>_tally``: per hour of ``data_hora`` (per day past the last two days), processo and
status, the attempts not re-enqueued (``tasks``), the failed ones and the dead letters'
first attempts. An
attempt still unfinished when its id is folded waits in ``<queue>_tally_open`` and is
counted once it ends. ``<queue>_tally_state`` holds how far the ids are folded
(``folded_to``) and the highest id the last fold saw (``seen``): each fold goes up to
that one, a fold interval old, so that an insert whose transaction was still open then
(its id taken, its row not visible yet) has committed by the time its id is folded.

``nsjq status`` then adds four parts, each bounded: the unfinished attempts (the
backlog's partial indexes), the tally, the attempts past ``folded_to`` (one interval's
worth) and the open attempts that ended since the last fold. Every attempt is in exactly
one part: a fold moves attempts from the last two into the tally in one transaction.

The counts stay exact, with two approximations, both of them bounded:
- An insert committed more than a fold interval after it took its id is never counted.
- The purge removes attempts by ``data_hora``. The tally drops whole hours past
  ``QUEUE_PURGE_MAX_AGE`` days, so for an hour the two can differ.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from nsj_queue_lib.db.dialect import tally_table_names

# Ids folded at most per run: a table's first fold goes through its history in steps.
FOLD_CHUNK = 500_000
# The last hours the tally keeps one by one (status's last 24 hours are counted by hour);
# older ones are merged into days.
HOURLY_HOURS = 48
# Open attempts looked at per run.
OPEN_BATCH = 20_000


def table_values(queue_table: str) -> dict[str, str]:
    """The tally's table names as ``tally.sql`` and ``inspection.sql`` name them."""
    tally, tally_open, tally_state = tally_table_names(queue_table)
    return dict(tally_table=tally, tally_open_table=tally_open, tally_state_table=tally_state)


Rows = Callable[[str, dict[str, Any]], list[tuple[Any, ...]]]
Execute = Callable[[str, dict[str, Any]], int]
ExecuteMany = Callable[[str, Sequence[dict[str, Any]]], None]


@dataclasses.dataclass(frozen=True)
class FoldResult:
    folded_to: int
    attempts: int  # finished attempts added to the tally
    opened: int  # unfinished attempts set aside in the open table
    more: bool  # ids left to fold right away (a table's first runs)


def fold(conn: Any, statements: dict[str, str], max_age_days: int) -> FoldResult:
    """One fold, in the caller's transaction (the caller commits), with the dialect's named
    statements of ``tally.sql`` on a DB-API connection (psycopg or PyMySQL)."""
    with conn.cursor() as cur:

        def rows(name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
            cur.execute(statements[name], params)
            return list(cur.fetchall())

        def execute(name: str, params: dict[str, Any]) -> int:
            cur.execute(statements[name], params)
            return int(cur.rowcount)

        def execute_many(name: str, params: Sequence[dict[str, Any]]) -> None:
            cur.executemany(statements[name], params)

        return _fold(rows, execute, execute_many, max_age_days)


def _fold(rows: Rows, execute: Execute, execute_many: ExecuteMany, max_age_days: int) -> FoldResult:
    state = rows("tally_state", {})
    if not state:
        execute("tally_start", {})
        state = rows("tally_state", {})
    lo, seen = (int(value) for value in state[0])
    hi = min(seen, lo + FOLD_CHUNK)
    opened = [{"id": row[0]} for row in rows("tally_unfinished_ids", {"lo": lo, "hi": hi})]
    if opened:
        execute_many("tally_add_open", opened)
    counted = [_counts(row) for row in rows("tally_range_counts", {"lo": lo, "hi": hi})]
    counted += _ended_open(rows, execute)
    for counts in counted:  # a row per hour, processo and status: few
        execute("tally_add", counts)
    for counts in _merged_days(rows, execute):
        execute("tally_add", counts)
    [(top,)] = rows("tally_max_id", {})
    execute("tally_advance", {"hi": hi, "seen": max(int(top), hi)})
    if max_age_days > 0:
        execute("tally_expire", {"max_age_days": max_age_days})
    return FoldResult(hi, sum(c["tasks"] for c in counted), len(opened), more=hi < seen)


def _merged_days(rows: Rows, execute: Execute) -> list[dict[str, Any]]:
    """The hours older than ``HOURLY_HOURS``, taken out to be added back as their day's
    first hour: the tally keeps a row per day, processo and status for most of the
    history, so that status sums a few thousand rows."""
    [(hour,)] = rows("tally_hour", {})
    before = {"before": int(hour) - HOURLY_HOURS}
    merged = [_counts(row) for row in rows("tally_old_hours", before)]
    if merged:
        execute("tally_drop_old_hours", before)
    return merged


def _counts(row: tuple[Any, ...]) -> dict[str, Any]:
    hour, processo, status, tasks, failed, dead = row
    return dict(
        hour=int(hour),
        processo=processo,
        status=status,
        tasks=int(tasks or 0),
        failed=int(failed or 0),
        dead=int(dead or 0),
    )


def _ended_open(rows: Rows, execute: Execute) -> list[dict[str, Any]]:
    """The open attempts that ended since, counted and taken out of the open table (those
    gone altogether too)."""
    gone = [row[0] for row in rows("tally_gone_open", {"limit": OPEN_BATCH})]
    if not gone:
        return []
    counts: Counter[tuple[int, str, str]] = Counter()
    failed: Counter[tuple[int, str, str]] = Counter()
    dead: Counter[tuple[int, str, str]] = Counter()
    for _id, hour, processo, status, is_task, is_failed, is_dead in rows(
        "tally_ended_rows", {"ids": gone}
    ):
        key = (int(hour), processo, status)
        counts[key] += int(bool(is_task))
        failed[key] += int(bool(is_failed))
        dead[key] += int(bool(is_dead))
    execute("tally_close_open", {"ids": gone})
    return [
        dict(hour=h, processo=p, status=s, tasks=counts[k], failed=failed[k], dead=dead[k])
        for k in counts
        for h, p, s in [k]
    ]
