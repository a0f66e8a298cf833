"""The inspection queries behind the console's overview, on every store: the last hour's
settled attempts per processo (and which of them ended in the last 5 minutes), the running
attempts per worker, and the live workers' rows."""

from __future__ import annotations

import datetime
import json

from nsj_queue_lib.web.overview import worker_rows
from tests.integration.store.backends import EVERY_STORE, ago, on

pytestmark = on(*EVERY_STORE)

WORKER = "pod-9:77:feedbeef"
SECOND = datetime.timedelta(seconds=1)


def now_sql(backend) -> str:
    """The database's clock in an UPDATE (a TIMESTAMP column takes NOW(6) in the session's
    time zone, which is the instant)."""
    return "clock_timestamp()" if backend.dialect == "postgres" else "NOW(6)"


def test_recent_counts_each_processos_settled_attempts_and_the_ones_that_just_ended(
    backend, worker
):
    inspection = backend.driver.new_inspection_store(backend.table)
    done, earlier, failed, dead = backend.enqueue(
        dict(processo="a", data_hora=ago(30)),
        dict(processo="a", data_hora=ago(1250)),
        dict(processo="b", data_hora=ago(30)),
        dict(processo="b", data_hora=ago(20)),
    )
    outside = backend.enqueue(processo="a", data_hora=ago(7200))
    backend.enqueue(processo="a", data_hora=ago(10))  # waiting: not settled
    backend.set_status("sucesso", done, earlier, outside, dead)
    backend.set_status("falha", failed)
    backend.execute(
        f"UPDATE {backend.table} SET dead = true, live_id = %s WHERE id = %s", (failed, dead)
    )
    # done and the dead letter ended just now; earlier ended before the rate's window.
    backend.execute(
        f"UPDATE {backend.table} SET finished_at = {now_sql(backend)} WHERE id IN (%s, %s)",
        (done, dead),
    )
    rows = {
        (r["bucket"], r["processo"], r["status"], r["dead"]): r for r in inspection.recent(worker)
    }
    assert {key: (r["tasks"], r["finished_recently"]) for key, r in rows.items()} == {
        (0, "a", "sucesso", False): (1, 1),
        (4, "a", "sucesso", False): (1, 0),  # due 1250 s ago: the fifth 5-minute bucket
        (0, "b", "falha", False): (1, 0),
        (0, "b", "sucesso", True): (1, 1),
    }


def test_running_attempts_are_counted_per_worker(backend, worker):
    inspection = backend.driver.new_inspection_store(backend.table)
    assert inspection.running_by_worker(worker) == {}
    backend.store.set_worker_name(WORKER)
    first, second = backend.enqueue(dict(processo="a"), dict(processo="b"))
    claimer = backend.worker()
    claimed = backend.claim(claimer)
    assert claimed is not None and claimed.id in (first, second)
    assert inspection.running_by_worker(worker) == {WORKER: 1}


def test_live_workers_come_back_as_instants_whatever_the_dialect(backend, worker):
    inspection = backend.driver.new_inspection_store(backend.table)
    before = backend.now()
    backend.store.worker_seen(worker, WORKER, json.dumps(["a", "b"]))
    backend.store.worker_seen(worker, "pod-10:1:every", None)
    [every, named] = worker_rows(inspection.live_workers(worker, 90), {WORKER: 3})
    assert (named["worker"], named["processos"], named["running"]) == (WORKER, ["a", "b"], 3)
    assert every["processos"] is None and every["running"] == 0
    after = backend.now()
    for text in (named["started_at"], named["seen_at"]):
        # Whole seconds on MySQL's epoch conversion of a microsecond timestamp: allow one.
        moment = datetime.datetime.fromisoformat(text)
        assert before - SECOND <= moment <= after + SECOND


def test_the_running_list_is_list_tasks_of_the_running_attempts(backend, worker):
    """nsjq status's list (PostgreSQL: a statement of its own, pinned to the hot partition
    of the partitioned layout) is what list_tasks gives for 'processando', newest first."""
    from nsj_queue_lib.db.inspection import TaskFilter

    inspection = backend.driver.new_inspection_store(backend.table)
    first, second, settled, _waiting = backend.enqueue(
        dict(processo="a"), dict(processo="b"), dict(processo="c"), dict(processo="d")
    )
    backend.set_status("processando", first, second)
    backend.set_status("sucesso", settled)
    listed = inspection.list_tasks(worker, TaskFilter(statuses=("processando",)), 10, 0)
    running = inspection.running(worker, 10)
    assert [r["id"] for r in running] == [second, first]

    def aged_out(rows):  # the age is the clock's at each call
        return [{k: v for k, v in r.items() if k != "age_seconds"} for r in rows]

    assert aged_out(running) == aged_out(listed)
    assert [r["id"] for r in inspection.running(worker, 1)] == [second]
