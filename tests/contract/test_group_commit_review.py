"""Group commit (docs/group-commit.md): cases found by a second reading of
runtime/group_commit.py. Each ``xfail(strict=True)`` names what is wrong; it turns into a
failure (to drop the mark) once that is fixed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from nsj_queue_lib import Task, WorkerBase, current_task
from tests.contract.test_group_commit import BOTH, GROUP, chains, worker_running, write_exec
from tests.helpers.endpoints import free_port
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)

GIVEN_BACK_CANCEL = (
    "group_commit._give_back_waiting/_give_back_on release a claimed task to 'pendente' "
    "without looking at its cancel request: cancel_task said it would stop, and any "
    "worker may now run it (fix: store.cancel_if_requested before store.release)"
)


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("postgres", marks=pytest.mark.xfail(strict=True, reason=GIVEN_BACK_CANCEL)),
        pytest.param(
            "mysql",
            marks=[pytest.mark.mysql, pytest.mark.xfail(strict=True, reason=GIVEN_BACK_CANCEL)],
        ),
    ],
    indirect=True,
)
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


METRICS_DISABLE_GROUPS = (
    "group_commit.group_drain unwraps one liveness wrapper (``inner``) before its "
    "isinstance(DatabaseLiveness) check: with QUEUE_METRICS_PORT, MeasuredLiveness wraps "
    "LimitedLiveness (always there on PostgreSQL and MySQL), so QUEUE_BATCH_SIZE is ignored with a warning that "
    "blames CLIENT_SERVER_MODE/QUEUE_COMPAT_1_2_2; and once on, group claims bypass "
    "MeasuredLiveness, so nsjq_queue_wait_seconds/claim/completion histograms stay empty "
    "(fix: unwrap every ``inner``; GroupDrain reports claims and commits to the observer)"
)


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(
            "postgres", marks=pytest.mark.xfail(strict=True, reason=METRICS_DISABLE_GROUPS)
        ),
        pytest.param(
            "mysql",
            marks=[
                pytest.mark.mysql,
                pytest.mark.xfail(strict=True, reason=METRICS_DISABLE_GROUPS),
            ],
        ),
    ],
    indirect=True,
)
def test_metrics_keep_group_commit_on_and_observe_its_claims(backend):
    backend.enqueue([dict(payload="ok")] * 4)
    worker = backend.run(
        backend.function_worker(lambda *args: "ok", queue_metrics_port=free_port(), **GROUP)
    )
    backend.wait_statuses({"sucesso": 4}, 20, "the group")
    assert worker.worker._runtime.executor.group is not None, "QUEUE_BATCH_SIZE was ignored"
    registry = worker.worker._runtime.endpoints.observer.registry
    labels = {"queue": backend.name, "processo": "processar"}
    finished = registry.get_sample_value(
        "nsjq_tasks_finished_total", {**labels, "outcome": "sucesso"}
    )
    assert finished == 4.0
    assert registry.get_sample_value("nsjq_queue_wait_seconds_count", labels) == 4.0
    assert worker.stop() == 0


LIMITED_NEVER_CLAIMED = (
    "group_commit.GroupDrain claims through GroupOps.claim_batch, the ordinary claim, which "
    "never takes a task of a limited processo (flow/limits.py); LimitedLiveness.claim is "
    "bypassed, so a group worker never runs a processo that has a limits row (declared by "
    "it or by any other worker of the queue) "
    "(fix: group_drain returns None while a Limiter is active, or GroupDrain tries "
    "liveness' limited claim first, as a group of one)"
)


class LimitedWorker(WorkerBase):
    @Task("limitado", max_concurrent=1)
    def on_limited(self, payload, tarefa, bd_conn):
        return "ok"

    def execute(self, payload, tarefa, bd_conn):
        return "ok"


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(
            "postgres", marks=pytest.mark.xfail(strict=True, reason=LIMITED_NEVER_CLAIMED)
        ),
        pytest.param(
            "mysql",
            marks=[pytest.mark.mysql, pytest.mark.xfail(strict=True, reason=LIMITED_NEVER_CLAIMED)],
        ),
    ],
    indirect=True,
)
def test_a_group_worker_runs_the_tasks_of_a_limited_processo(backend):
    backend.enqueue([dict(processo="limitado")] * 2 + [dict(processo="processar")] * 2)
    worker = backend.run(LimitedWorker(settings=backend.settings(**GROUP)))
    backend.wait_statuses({"sucesso": 4}, 8, "the limited and the ordinary tasks")
    assert worker.stop() == 0
