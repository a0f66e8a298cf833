"""The task life cycle with ``async def`` handlers (docs/lifecycle.md, issue 18 item 2).

An async handler sees ``current_task()`` inside its coroutine, its progress is
seen from another session while it runs, a cancel request stops it
('cancelada', its writes rolled back), and past its timeout it is asked to stop;
one that does not stop within the grace period has its coroutine cancelled and
its session ended, and the attempt is retried, while the other coroutines drain.
A connection lost under an async handler releases the attempt, due at once.
"""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from nsj_queue_lib import TaskCancelled, current_task
from nsj_queue_lib.worker_base import WorkerBase
from tests.contract.test_connection_loss import _kill_session, assert_released_at_once
from tests.contract.test_lifecycle import TIMEOUT_SETTINGS, cancel, time_out_two, view
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)

BOTH = pytest.mark.parametrize(
    "backend", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True
)


def async_function_worker(backend, execute, **changes):
    """A worker whose ``execute`` is ``async def`` and awaits ``execute``."""

    class AsyncFunctionWorker(WorkerBase):
        async def execute(self, payload, tarefa, bd_conn):
            return await execute(payload, tarefa, bd_conn)

    return AsyncFunctionWorker(settings=backend.settings(**changes))


async def write_exec(backend, bd_conn, tarefa) -> None:
    """The handler's business write, through the async ``bd_conn``, in the task's transaction."""
    await bd_conn.execute(
        f"INSERT INTO {backend.exec_table} (task_id, chave, pid) VALUES (%s, %s, %s)",
        (tarefa["id"], tarefa["chave_externa"], os.getpid()),
    )


@BOTH
def test_an_async_handler_sees_its_task_reports_progress_and_is_cancelled(backend):
    seen = []

    async def execute(payload, tarefa, bd_conn):
        await write_exec(backend, bd_conn, tarefa)  # must roll back
        task = current_task()
        seen.append((task.id, task.id_inicial))
        for step in range(1, 1000):
            task.report_progress(step, 1000, f"step {step}")
            task.check_cancelled()
            await asyncio.sleep(0.02)
        return "never"

    worker = backend.run(async_function_worker(backend, execute))
    assert worker.runtime.executor.asynchronous
    [task_id] = backend.enqueue([dict(payload="{}")])
    wait_for(
        lambda: (view(backend, task_id)["progress"] or {}).get("done", 0) >= 2,
        10,
        "the progress to show while the task runs",
    )
    running = view(backend, task_id)
    assert running["status"] == "processando" and running["progress"]["total"] == 1000
    assert running["progress"]["message"] == f"step {running['progress']['done']}"
    assert cancel(backend, task_id) == "processando"
    wait_for(lambda: backend.row(task_id)["status"] == "cancelada", 5, "the cancel to stop it")
    assert seen == [(task_id, task_id)]
    assert backend.statuses() == {"cancelada": 1}  # no retry
    assert backend.exec_rows() == []
    assert view(backend, task_id)["progress"]["done"] >= running["progress"]["done"]
    assert worker.stop() == 0


@BOTH
def test_an_async_handler_past_its_timeout_is_given_up_and_retried(backend):
    stops = []

    async def execute(payload, tarefa, bd_conn):
        await write_exec(backend, bd_conn, tarefa)
        if tarefa["tentativa"] == 1 and payload == "hangs":
            try:
                await asyncio.sleep(60)  # never looks at the request
            except asyncio.CancelledError:
                stops.append("cancelled")
                raise
        elif tarefa["tentativa"] == 1 and payload == "cooperates":
            try:
                while True:
                    current_task().check_cancelled()
                    await asyncio.sleep(0.02)
            except TaskCancelled:
                stops.append(current_task().stop_reason)
                raise
        return f"attempt {tarefa['tentativa']}"

    worker = backend.run(async_function_worker(backend, execute, **TIMEOUT_SETTINGS))
    time_out_two(backend)
    assert sorted(stops) == ["cancelled", "timeout"]
    assert worker.runtime.lifecycle.timeouts.given_up == 1
    assert worker.alive() and worker.stop() == 0


@BOTH
def test_a_connection_lost_under_an_async_handler_is_released_for_an_attempt_due_at_once(
    backend,
):
    sessions: list[int] = []
    started, killed = threading.Event(), threading.Event()

    async def execute(payload, tarefa, bd_conn):
        if tarefa["tentativa"] == 1:
            pg = backend.family == "postgres"
            sessions.append(bd_conn.info.backend_pid if pg else bd_conn.raw.thread_id())
            started.set()
            assert await asyncio.to_thread(killed.wait, 10)
            await bd_conn.execute("SELECT 1")  # the session is gone: this raises
        return "second attempt"

    backend.run(async_function_worker(backend, execute, queue_base_interval_retry=10))
    [task] = backend.enqueue([dict(payload="lost")])
    assert started.wait(15), "the handler did not start"
    _kill_session(backend, sessions[0])
    killed.set()
    assert_released_at_once(backend, task)
