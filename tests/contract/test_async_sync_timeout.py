"""A sync handler of a worker with async handlers, past its timeout (issue 18).

Such a worker runs its tasks on an event loop; its sync handlers run in
handler threads. One that does not return within its timeout and grace period
is given up as an executor thread's would be: its session is ended, the
attempt fails with 'timeout' and is retried, and its slot serves other tasks
at once, while the stuck thread (Python cannot stop it) counts as stuck until
it returns.
"""

from __future__ import annotations

import os
import threading

import pytest

from nsj_queue_lib import Task, WorkerBase
from tests.contract.test_lifecycle import TIMEOUT_SETTINGS, view
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(
    "backend", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True
)
def test_a_stuck_sync_handler_of_an_async_worker_is_given_up_and_frees_its_slot(backend):
    release = threading.Event()

    class Mixed(WorkerBase):
        @Task("async")
        async def on_async(self, payload, tarefa, bd_conn):
            return "async"

        def execute(self, payload, tarefa, bd_conn):
            with bd_conn.cursor() as cur:
                cur.execute(
                    f"INSERT INTO {backend.exec_table} (task_id, chave, pid) VALUES (%s, %s, %s)",
                    (tarefa["id"], payload, os.getpid()),
                )
            if payload == "hangs" and tarefa["tentativa"] == 1:
                release.wait(60)  # never looks at the request
            return f"attempt {tarefa['tentativa']}"

    settings = dict(TIMEOUT_SETTINGS, queue_concurrency=1)
    running = backend.run(Mixed(backend.settings(**settings)))
    executor = running.runtime.executor
    assert executor is not None and executor.asynchronous
    try:
        [hangs] = backend.enqueue([dict(payload="hangs")])
        # One slot: the retry and the next task run only if the stuck handler freed it.
        backend.wait_statuses({"falha": 1, "sucesso": 1}, 15, "the timeout and the retry")
        [quick] = backend.enqueue([dict(payload="quick")])
        wait_for(lambda: backend.row(quick)["status"] == "sucesso", 10, "the next task")
        assert backend.row(hangs)["mensagem"].startswith("timeout"), backend.row(hangs)
        assert view(backend, hangs)["mensagem"] == "attempt 2"
        assert running.runtime.lifecycle.timeouts.given_up == 1
        assert executor.stuck_threads() == 1
        [retry] = backend.rows("id_anterior = %s", (hangs,))
        assert sorted(r["task_id"] for r in backend.exec_rows()) == [retry["id"], quick]
    finally:
        release.set()  # the given-up handler returns late: nothing changes
    wait_for(lambda: executor.stuck_threads() == 0, 10, "the stuck thread to return")
    assert backend.statuses() == {"falha": 1, "sucesso": 2}
    assert running.alive() and running.stop() == 0
