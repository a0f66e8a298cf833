"""``async def`` handlers (issue 18 item 2) on PostgreSQL and MariaDB.

The worker is ``workers/async_worker.py``: processo "async" is an ``async def``
``@Task`` method writing through the async ``bd_conn``, every other processo the
sync ``execute``. In-process workers unless a signal or kill -9 is the point.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from nsj_queue_lib.runtime.async_slots import HANDLER_CLOSED_CONNECTION
from nsj_queue_lib.runtime.attempt import HANDLER_ENDED_TRANSACTION
from nsj_queue_lib.runtime.retry import ORPHAN_MESSAGE
from tests.contract.backends import counts
from tests.helpers.endpoints import free_port, samples, total
from tests.helpers.processes import wait_for

ASYNC_WORKER = Path(__file__).resolve().parent / "workers" / "async_worker.py"
RETRY_BASE_MINUTES = 0.125 / 60

BOTH = pytest.mark.parametrize(
    "backend", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True
)


def async_worker(backend, worker_class=None, **changes):
    """An in-process ``AsyncContractWorker`` (or ``worker_class``, a subclass) on the queue."""
    from tests.contract.workers.async_worker import AsyncContractWorker

    return (worker_class or AsyncContractWorker)(
        backend.settings(**changes),
        exec_table=backend.exec_table,
        started_table=backend.started_table,
        ready_file="",
    )


@pytest.mark.parametrize(
    "backend",
    [
        "postgres",
        "postgres-via-server",  # liveness locks on the socket server: the threaded calls
        pytest.param("mysql", marks=pytest.mark.mysql),
    ],
    indirect=True,
)
def test_sync_and_async_handlers_in_one_worker_drain_every_task_exactly_once(backend):
    running = backend.run(async_worker(backend, queue_concurrency=6, queue_pool_size=3))
    assert running.runtime.executor.asynchronous
    tasks = [dict(processo="async", payload=json.dumps({"sleep": 0.05}))] * 40
    tasks += [dict(processo="sync", payload="{}")] * 20
    ids = backend.enqueue(tasks, bulk=True)
    backend.wait_statuses({"sucesso": 60}, 20, "every task to succeed")

    assert counts(r["task_id"] for r in backend.exec_rows()) == dict.fromkeys(ids, 1)
    messages = {r["id"]: r["mensagem"] for r in backend.rows()}
    assert {messages[i] for i in ids[:40]} == {f"async done by {os.getpid()}"}
    assert {messages[i] for i in ids[40:]} == {f"done by {os.getpid()}"}
    assert running.stop() == 0


@BOTH
def test_an_async_failure_rolls_back_its_writes_and_is_retried(backend):
    running = backend.run(
        async_worker(backend, queue_concurrency=2, queue_base_interval_retry=RETRY_BASE_MINUTES)
    )
    [task_id] = backend.enqueue([dict(processo="async", payload=json.dumps({"fail_on": [1]}))])
    backend.wait_statuses({"falha": 1, "sucesso": 1}, 10, "the failure and the retry")
    first = backend.row(task_id)
    [retry] = backend.rows("id_anterior = %s", (task_id,))
    assert "planned async failure of attempt 1" in first["mensagem"]
    assert first["reenfileirado"] is True and retry["tentativa"] == 2
    # The failed attempt's write was rolled back; the retry's committed with its 'sucesso'.
    assert [r["task_id"] for r in backend.exec_rows()] == [retry["id"]]
    assert running.stop() == 0


@BOTH
def test_an_async_handler_that_commits_or_closes_bd_conn_fails_with_a_clear_error(backend):
    running = backend.run(async_worker(backend, queue_concurrency=2, queue_max_retry=1))
    committed, closed = backend.enqueue(
        [
            dict(processo="async", payload=json.dumps({"commit": True})),
            dict(processo="async", payload=json.dumps({"close": True})),
        ]
    )
    wait_for(
        lambda: all(backend.row(i)["status"] == "falha" for i in (committed, closed)),
        10,
        "both misusing attempts to fail",
    )
    assert "HandlerTransactionError" in backend.row(committed)["mensagem"]
    assert HANDLER_ENDED_TRANSACTION[:40] in backend.row(committed)["mensagem"]
    assert "HandlerTransactionError" in backend.row(closed)["mensagem"]
    assert HANDLER_CLOSED_CONNECTION[:40] in backend.row(closed)["mensagem"]
    # The worker goes on: a well-behaved task after them succeeds.
    [ok] = backend.enqueue([dict(processo="async", payload="{}")])
    wait_for(lambda: backend.row(ok)["status"] == "sucesso", 10, "the next task to succeed")
    assert running.stop() == 0


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@BOTH
def test_a_coroutine_that_blocks_the_event_loop_is_logged_with_its_task_id(backend):
    lines = _Lines()
    logger = logging.getLogger("nsj_queue_lib.executor")
    logger.addHandler(lines)
    try:
        running = backend.run(async_worker(backend, queue_concurrency=2))
        [task_id] = backend.enqueue([dict(processo="async", payload=json.dumps({"block": 1.6}))])
        wait_for(lambda: backend.row(task_id)["status"] == "sucesso", 10, "the task to succeed")
        assert running.stop() == 0
    finally:
        logger.removeHandler(lines)
    blocked = [line for line in lines.lines if "blocked the event loop" in line]
    assert blocked and f"task={task_id}:" in blocked[0], lines.lines


@BOTH
def test_kill_9_mid_async_task_is_rescued_and_retried(backend):
    victim = backend.start_process("victim", script=ASYNC_WORKER)
    [task_id] = backend.enqueue(
        [
            dict(
                processo="async",
                payload=json.dumps({"sleep": 60, "sleep_on": [1], "started": True}),
            )
        ]
    )
    wait_for(lambda: backend.started_ids() == [task_id], 15, "the victim to start the task")
    assert backend.row(task_id)["status"] == "processando"
    victim.kill9()
    rescuer = backend.run(
        async_worker(
            backend, queue_retry_thread_interval=0.3, queue_base_interval_retry=RETRY_BASE_MINUTES
        )
    )
    backend.wait_statuses(
        {"falha_processando": 1, "sucesso": 1}, 15, "the rescue and the retry to succeed"
    )
    assert ORPHAN_MESSAGE in backend.row(task_id)["mensagem"]
    [retry] = backend.rows("id_anterior = %s", (task_id,))
    assert [(r["task_id"], r["pid"]) for r in backend.exec_rows()] == [(retry["id"], os.getpid())]
    assert rescuer.stop() == 0


@BOTH
def test_metrics_count_async_tasks_whose_claims_stay_awaited(backend):
    port = free_port()
    running = backend.run(async_worker(backend, queue_concurrency=3, queue_metrics_port=port))
    # The measured liveness keeps the awaited round trips where the store has them.
    assert running.runtime.executor.liveness.awaitable is (backend.family == "postgres")
    backend.enqueue([dict(processo="async", payload="{}")] * 20, bulk=True)
    backend.wait_statuses({"sucesso": 20}, 20, "every task to succeed")
    # A task is counted just after its commit: the table can be ahead for a moment.
    wait_for(
        lambda: total(samples(port), "nsjq_tasks_finished_total", outcome="sucesso") >= 20,
        10,
        "the metrics to count every task",
    )
    found = samples(port)
    assert total(found, "nsjq_tasks_finished_total", outcome="sucesso") == 20
    assert total(found, "nsjq_completion_duration_seconds_count") == 20
    assert total(found, "nsjq_handler_duration_seconds_count") == 20
    assert running.stop() == 0
