"""An attempt given back at shutdown (still running after QUEUE_GRACE_PERIOD) is counted in
nsjq_tasks_finished_total under outcome="released" (docs/metrics.md), like its row says."""

from __future__ import annotations

import pytest

from nsj_queue_lib import QueueClient, WorkerBase
from tests.helpers.databases import connect_pg
from tests.helpers.endpoints import free_port
from tests.helpers.worker_harness import rows, running, wait_until, worker_settings

pytestmark = pytest.mark.timeout(60)


class Stuck(WorkerBase):
    def execute(self, payload, tarefa, bd_conn):
        bd_conn.execute("SELECT pg_sleep(30)")  # ends when the release terminates the session
        return "never"


def test_an_attempt_released_at_shutdown_is_counted_released(pg_queue, pg_autocommit):
    conn = connect_pg(pg_queue.dsn)
    try:
        task_id = QueueClient(conn, pg_queue.table).insert_task("o", "d", "lento", "k", "{}")
        conn.commit()
    finally:
        conn.close()
    worker = Stuck(
        worker_settings(pg_queue, queue_grace_period=0.5, queue_metrics_port=free_port())
    )
    with running(worker):
        wait_until(
            lambda: (
                rows(pg_autocommit, pg_queue.table, "id = %s", (task_id,))[0]["status"]
                == "processando"
            ),
            what="the task to start",
        )
    (released,) = rows(pg_autocommit, pg_queue.table, "id = %s", (task_id,))
    assert released["status"] == "falha_processando"
    registry = worker._runtime.endpoints.observer.registry
    labels = {"queue": pg_queue.name, "processo": "lento"}
    assert (
        registry.get_sample_value("nsjq_tasks_finished_total", {**labels, "outcome": "released"})
        == 1.0
    )
    assert registry.get_sample_value(
        "nsjq_tasks_finished_total", {**labels, "outcome": "sucesso"}
    ) in (None, 0.0)
