"""Group commit (docs/group-commit.md): cases found by a second reading of
runtime/group_commit.py (each failed before its fix).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from nsj_queue_lib import Task, WorkerBase, current_task
from nsj_queue_lib.runtime.drain_group import GroupDrain
from tests.contract.test_group_commit import BOTH, GROUP, chains, worker_running, write_exec
from tests.helpers.endpoints import free_port
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)


@BOTH
def test_a_cancelled_task_the_group_gives_back_unstarted_ends_cancelled(backend):
    gate, hold = threading.Event(), threading.Event()

    def execute(payload, tarefa, bd_conn):
        current_task().check_cancelled()
        if payload == "first":
            gate.wait(15)
            time.sleep(0.3)  # slow: the group keeps one task and gives the rest back
        elif payload == "holds":
            hold.wait(15)
        return "ok"

    ids = backend.enqueue([dict(payload=p) for p in ["first", "holds", "cancelled"]])
    worker = backend.run(
        backend.function_worker(
            execute, queue_concurrency=1, queue_batch_size=10, queue_batch_max_ms=20
        )
    )
    try:
        wait_for(lambda: ids[0] in worker_running(worker), 15, "the first task to start")
        with backend.transaction() as conn:
            # Claimed by the group, not started: its cancel is a request.
            assert backend.client(conn).cancel_task(ids[2]) == "processando"
        gate.set()
        # The first handler was slow: the group keeps "holds" and gives "cancelled" back.
        wait_for(lambda: ids[1] in worker_running(worker), 15, "the second task to start")
        wait_for(
            lambda: backend.row(ids[2])["status"] != "processando",
            15,
            "the unstarted task to be given back",
        )
        assert backend.row(ids[2])["status"] == "cancelada"
    finally:
        gate.set()
        hold.set()
    assert worker.stop() == 0


@BOTH
def test_a_handler_that_commits_then_raises_does_not_run_the_earlier_tasks_again(backend):
    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)
        if payload == "commits then raises" and tarefa["tentativa"] == 1:
            bd_conn.commit()  # the group's transaction, with the two tasks before it
            write_exec(backend, bd_conn, tarefa)  # no transaction: committed at once
            raise RuntimeError("planned failure after a commit")
        return "ok"

    ids = backend.enqueue([dict(payload=p) for p in ["ok", "ok", "commits then raises"]])
    worker = backend.run(backend.function_worker(execute, **GROUP))
    backend.wait_statuses({"sucesso": 3, "falha": 1}, 20, "every task done")
    # The two tasks before it ran once (their 'sucesso' written after the commit it made);
    # the offender's own writes outside the worker's transaction stayed, as without groups.
    assert chains(backend) == Counter({ids[0]: 1, ids[1]: 1, ids[2]: 3})
    assert worker.stop() == 0


@BOTH
def test_metrics_keep_group_commit_on_and_observe_its_claims(backend):
    backend.enqueue([dict(payload="ok")] * 4)
    worker = backend.run(
        backend.function_worker(lambda *args: "ok", queue_metrics_port=free_port(), **GROUP)
    )
    backend.wait_statuses({"sucesso": 4}, 20, "the group")
    assert worker.worker._runtime.executor.group_commit, "QUEUE_BATCH_SIZE was ignored"
    registry = worker.worker._runtime.endpoints.observer.registry
    labels = {"queue": backend.name, "processo": "processar"}
    # Counted as the group's commit returns, just after another session can see it.
    wait_for(
        lambda: (
            registry.get_sample_value("nsjq_tasks_finished_total", {**labels, "outcome": "sucesso"})
            == 4.0
        ),
        10,
        "the successes counted",
    )
    assert registry.get_sample_value("nsjq_queue_wait_seconds_count", labels) == 4.0
    assert worker.stop() == 0


class LimitedWorker(WorkerBase):
    @Task("limitado", max_concurrent=1)
    def on_limited(self, payload, tarefa, bd_conn):
        return "ok"

    def execute(self, payload, tarefa, bd_conn):
        return "ok"


@BOTH
def test_a_group_worker_runs_the_tasks_of_a_limited_processo(backend):
    backend.enqueue([dict(processo="limitado")] * 2 + [dict(processo="processar")] * 2)
    worker = backend.run(LimitedWorker(settings=backend.settings(**GROUP)))
    backend.wait_statuses({"sucesso": 4}, 8, "the limited and the ordinary tasks")
    assert worker.stop() == 0


SLEEP = {"postgres": "SELECT pg_sleep(60)", "mysql": "SELECT SLEEP(60)"}


@BOTH
def test_a_handler_returning_as_it_is_given_up_leaves_no_task_of_its_group_behind(backend):
    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)
        if payload == "hangs" and tarefa["tentativa"] == 1:
            # Ignores the stop request; returns (an error) as soon as its session is ended.
            backend.execute(SLEEP[backend.family], conn=bd_conn)
        return "ok"

    ids = backend.enqueue([dict(payload=p) for p in ["ok", "hangs", "ok", "ok"]])
    worker = backend.run(
        backend.function_worker(
            execute, queue_task_timeout=1.0, queue_task_timeout_grace=0.5, **GROUP
        )
    )
    executor = worker.worker._runtime.executor
    given_up = executor.given_up

    def late(item):
        # The timeout's thread is slow: the handler returned and its thread is done with
        # the group before given_up() runs here.
        wait_for(lambda: item.thread_id not in executor.group._groups, 15, "the group to end")
        given_up(item)

    executor.given_up = late
    # The group's other tasks went back to the queue at once (not left 'processando' for
    # the retry service) and ran again.
    backend.wait_statuses({"sucesso": 4, "falha": 1}, 20, "every task done")
    assert backend.row(ids[1])["mensagem"].startswith("timeout")
    assert chains(backend) == Counter({task_id: 1 for task_id in ids})
    assert worker.stop() == 0


@BOTH
def test_an_unexpected_error_in_a_group_does_not_pool_its_liveness_locks(backend, monkeypatch):
    commit = GroupDrain._settle
    raised = []

    def fails_once(self, conn, group):
        if not raised:
            raised.append(True)
            raise RuntimeError("a bug")
        return commit(self, conn, group)

    monkeypatch.setattr(GroupDrain, "_settle", fails_once)
    backend.enqueue([dict(payload="ok")] * 3)
    worker = backend.run(
        backend.function_worker(lambda *args: "ok", queue_retry_thread_interval=0.3, **GROUP)
    )
    # The group's connection was closed, its locks with it: the retry service rescues the
    # tasks (pooled, it held them 'processando' for the connection's life).
    backend.wait_statuses({"falha_processando": 3, "sucesso": 3}, 20, "the tasks rescued")
    assert raised
    assert worker.stop() == 0


@BOTH
@pytest.mark.parametrize(("tasks", "wakes"), [(3, False), (25, True)])
def test_a_group_wakes_an_idle_executor_only_when_its_claim_was_full(
    backend, monkeypatch, tasks, wakes
):
    # A claim that got fewer tasks than it asked for found no more it could take: an idle
    # executor woken to look again walked the whole backlog for nothing (issue 19).
    woken = []
    init = GroupDrain.__init__

    def counting(self, *args, **kwargs):
        init(self, *args, **kwargs)
        tokens = self.tokens

        def from_drain():
            woken.append(True)
            return tokens.wake_one_idle()

        self.tokens = _WakeSpy(tokens, from_drain)

    monkeypatch.setattr(GroupDrain, "__init__", counting)
    backend.enqueue([dict(payload="ok")] * tasks)
    worker = backend.run(backend.function_worker(lambda *args: "ok", queue_concurrency=2, **GROUP))
    backend.wait_statuses({"sucesso": tasks}, 20, "every task done")
    assert bool(woken) is wakes
    assert worker.stop() == 0


class _WakeSpy:
    """The wake-up tokens as GroupDrain sees them, its idle-slot wake-ups counted."""

    def __init__(self, tokens, wake):
        self.tokens = tokens
        self.wake_one_idle = wake

    def __getattr__(self, name):
        return getattr(self.tokens, name)
