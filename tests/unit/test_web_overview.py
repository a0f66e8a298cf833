"""A queue's statistics per processo and its live workers (nsj_queue_lib/web/overview.py),
from the rows the inspection queries return."""

from __future__ import annotations

import json

from nsj_queue_lib.db.inspection import RATE_WINDOW
from nsj_queue_lib.web.overview import processo_rows, queue_stats, worker_rows

DEPTH = [
    dict(processo="import", status="pendente", tasks=4, oldest_ready_seconds=12.5),
    dict(processo="import", status="agendada", tasks=1, oldest_ready_seconds=None),
    dict(processo="import", status="processando", tasks=2, oldest_ready_seconds=None),
    dict(processo="orphan", status="pendente", tasks=3, oldest_ready_seconds=40.0),
]


def recent(bucket, processo, status, tasks, finished=0, dead=False):
    return dict(
        bucket=bucket,
        processo=processo,
        status=status,
        dead=dead,
        tasks=tasks,
        finished_recently=finished,
    )


RECENT = [
    recent(0, "import", "sucesso", 10, finished=10),
    recent(3, "import", "sucesso", 20),
    recent(0, "sync", "falha", 3),
    recent(1, "sync", "falha_processando", 1),
    recent(0, "sync", "sucesso", 3, finished=3, dead=True),  # dead letters, handled
    recent(-1, "import", "cancelada", 5),  # due later: outside the window
    recent(12, "import", "sucesso", 9),  # the window's very edge
]
LIVE = [
    dict(worker="pod-a:1:x", processos=json.dumps(["import"]), started_at=0, seen_at=60.5),
    dict(worker="pod-b:2:y", processos=None, started_at=1.25, seen_at=61),
]


def test_each_processo_gets_its_backlog_its_last_hour_and_its_rate():
    workers = worker_rows(LIVE, {"pod-a:1:x": 2})
    rows = {r["processo"]: r for r in processo_rows(DEPTH, RECENT, workers)}
    assert list(rows) == ["import", "orphan", "sync"]
    imp, sync = rows["import"], rows["sync"]
    assert (imp["waiting"], imp["running"], imp["oldest_ready_seconds"]) == (5, 2, 12.5)
    assert (imp["done_last_hour"], imp["failed_last_hour"]) == (30, 0)
    assert imp["done_per_minute"] == round(10 * 60 / RATE_WINDOW, 1)
    # The failing processo: its dead letters are neither done nor failed attempts.
    assert (sync["done_last_hour"], sync["failed_last_hour"]) == (0, 4)
    assert (sync["dead_letters_last_hour"], sync["done_per_minute"]) == (3, 0.0)
    # Workers claiming each: pod-b claims every processo.
    assert (imp["workers"], rows["orphan"]["workers"], sync["workers"]) == (2, 1, 1)


def test_without_a_workers_table_the_workers_are_unknown():
    assert worker_rows(None, {}) is None
    assert {r["workers"] for r in processo_rows(DEPTH, RECENT, None)} == {None}


def test_live_workers_read_as_the_api_shows_them():
    workers = worker_rows(LIVE, {"pod-a:1:x": 2, None: 5})
    assert workers[0] == {
        "worker": "pod-a:1:x",
        "processos": ["import"],
        "started_at": "1970-01-01T00:00:00+00:00",
        "seen_at": "1970-01-01T00:01:00.500000+00:00",
        "running": 2,
    }
    assert workers[1]["processos"] is None and workers[1]["running"] == 0


def test_the_queue_totals_and_chart_leave_handled_dead_letters_out_of_done():
    stats = queue_stats("public.q", DEPTH, RECENT, None)
    assert stats["waiting"] == {"pendente": 7, "agendada": 1, "processando": 2}
    assert stats["oldest_ready_seconds"] == 40.0
    assert stats["last_hour"]["sucesso"] == 33 and stats["last_hour"]["falha"] == 3
    newest = stats["series"][-1]
    assert (newest["done"], newest["failed"]) == (10, 3)
    assert stats["workers"] is None and len(stats["processos"]) == 3
