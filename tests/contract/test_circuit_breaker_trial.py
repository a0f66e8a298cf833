"""The circuit breaker's trial (CONTRACT.md section 8: "after the cool-down exactly one trial
task runs; its failure re-opens the breaker, its success closes it"), when the trial does
not simply succeed or fail: cancelled, released at the worker's stop, ending in the stop's
grace period, its outcome lost, or another task of the processo ending during it. None of
them may leave the breaker half-open for good (fleet/breakers.py). And the operator's
reset (``QueueClient.reset_breaker``). PostgreSQL (direct and through the socket server)
and MariaDB, in-process workers.
"""

from __future__ import annotations

import threading
import time

import pytest

from nsj_queue_lib import Task, WorkerBase, current_task
from tests.contract.test_circuit_breaker import PROCESSO, breaker, opened
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(90)

BACKENDS = pytest.mark.parametrize(
    "backend",
    ["postgres", "postgres-via-server", pytest.param("mysql", marks=pytest.mark.mysql)],
    indirect=True,
)
COOL_DOWN_S = 1.0


class Downstream:
    """The handler's behaviour per payload: ``fail`` raises, ``hold`` waits for its event
    (then succeeds, or raises with ``hold_fails``), ``until_cancelled`` runs until the task
    is cancelled, anything else succeeds."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.hold_fails = False
        self.slow_released = threading.Event()

    def worker(self, backend, **settings) -> WorkerBase:
        downstream = self

        class Fragile(WorkerBase):
            @Task(PROCESSO, max_retry=1, circuit_breaker=(3, COOL_DOWN_S))
            def call(self, payload, tarefa, bd_conn):
                if payload == "fail":
                    raise RuntimeError("downstream answered 500")
                if payload == "slow":
                    downstream.slow_released.wait(20)
                elif payload == "hold":
                    downstream.released.wait(20)
                    if downstream.hold_fails:
                        raise RuntimeError("downstream answered 500")
                elif payload == "until_cancelled":
                    for _ in range(400):
                        current_task().check_cancelled()
                        time.sleep(0.05)
                return "ok"

            def execute_dead(self, payload, tarefa, bd_conn):
                return "noted"

        return Fragile(backend.settings(**{"queue_concurrency": 1, **settings}))


def in_trial(backend, task_id: int) -> bool:
    row = breaker(backend)
    return (
        row is not None
        and bool(row["breaker_trial"])
        and backend.row(task_id)["status"] == "processando"
    )


def open_breaker(backend) -> None:
    backend.enqueue([dict(processo=PROCESSO, payload="fail") for _ in range(3)])
    wait_for(lambda: opened(backend), 10, "the breaker to open after 3 failures")


def start_trial(backend, payload: str) -> int:
    [trial] = backend.enqueue([dict(processo=PROCESSO, payload=payload)])
    wait_for(lambda: in_trial(backend, trial), 10, "the trial to start after the cool-down")
    assert breaker(backend)["breaker_trial_task"] == trial
    return trial


@BACKENDS
def test_a_cancelled_trial_lets_the_next_task_be_the_trial(backend):
    worker = backend.run(Downstream().worker(backend))
    open_breaker(backend)
    trial = start_trial(backend, "until_cancelled")
    [held] = backend.enqueue([dict(processo=PROCESSO, payload="ok")])
    with backend.transaction() as conn:
        backend.client(conn).cancel_task(trial)
    # The cancelled trial decides nothing; the next task is the trial and closes it.
    wait_for(lambda: backend.row(held)["status"] == "sucesso", 15, "the next trial")
    assert backend.row(trial)["status"] == "cancelada"
    wait_for(lambda: breaker(backend) is None, 5, "the breaker to close")
    assert worker.stop() == 0


@BACKENDS
def test_only_the_trial_decides_not_a_task_claimed_before_the_breaker_opened(backend):
    downstream = Downstream()
    downstream.hold_fails = True
    worker = backend.run(downstream.worker(backend, queue_concurrency=2))
    [slow] = backend.enqueue([dict(processo=PROCESSO, payload="slow")])
    wait_for(lambda: backend.row(slow)["status"] == "processando", 10, "the slow task")
    open_breaker(backend)
    until = breaker(backend)["breaker_until"]
    trial = start_trial(backend, "hold")
    downstream.slow_released.set()  # claimed before the breaker opened; succeeds now
    wait_for(lambda: backend.row(slow)["status"] == "sucesso", 10, "the slow task's end")
    time.sleep(0.5)  # the recorder writes within milliseconds
    row = breaker(backend)
    assert row is not None and row["breaker_open"] and row["breaker_trial"], row
    downstream.released.set()  # the trial fails: open again
    wait_for(
        lambda: opened(backend) and breaker(backend)["breaker_until"] > until,
        10,
        "the failed trial to open the breaker again",
    )
    wait_for(lambda: backend.row(trial)["status"] != "processando", 5, "the trial's end")
    assert not breaker(backend)["breaker_trial"]
    assert worker.stop() == 0


@BACKENDS
def test_a_trial_ending_in_the_stop_grace_period_still_decides(backend):
    downstream = Downstream()
    worker = backend.run(downstream.worker(backend, queue_grace_period=10.0))
    open_breaker(backend)
    trial = start_trial(backend, "hold")
    stopping = threading.Thread(target=worker.stop)
    stopping.start()
    time.sleep(0.5)  # the worker is stopping: its threads were told to end
    downstream.released.set()
    stopping.join(20)
    assert backend.row(trial)["status"] == "sucesso"
    assert breaker(backend) is None  # the success was written before the worker ended


@BACKENDS
def test_a_trial_released_at_the_stop_is_undecided(backend):
    downstream = Downstream()
    worker = backend.run(downstream.worker(backend, queue_grace_period=0.5))
    open_breaker(backend)
    start_trial(backend, "hold")
    try:
        assert worker.stop() == 0
    finally:
        downstream.released.set()
    row = breaker(backend)
    # Still open (nothing decided), and a new trial may start at once.
    assert row is not None and row["breaker_open"]
    assert not row["breaker_trial"] and row["breaker_trial_task"] is None


@BACKENDS
def test_a_trial_given_up_after_its_timeout_lets_the_next_task_be_the_trial(backend):
    downstream = Downstream()
    worker = backend.run(
        downstream.worker(backend, queue_task_timeout=1.0, queue_task_timeout_grace=0.5)
    )
    try:
        open_breaker(backend)
        trial = start_trial(backend, "hold")  # ignores the stop request: given up
        [held] = backend.enqueue([dict(processo=PROCESSO, payload="ok")])
        wait_for(lambda: backend.row(held)["status"] == "sucesso", 15, "the next trial")
        assert backend.row(trial)["status"] != "processando"
        wait_for(lambda: breaker(backend) is None, 5, "the breaker to close")
    finally:
        downstream.released.set()
    assert worker.stop() == 0


def seed_lost_trial(backend) -> None:
    """The row a worker killed after its trial's commit leaves: open, a trial started
    100 s ago whose outcome never came."""
    now = backend.now_sql.removeprefix("SELECT ")
    backend.execute(
        f"INSERT INTO {backend.table}_limits (processo, breaker_open, breaker_until,"
        " breaker_trial, breaker_trial_at, breaker_trial_task)"
        f" VALUES (%s, true, {now} - INTERVAL '50' SECOND, true,"
        f" {now} - INTERVAL '100' SECOND, 999999999)",
        (PROCESSO,),
    )


@BACKENDS
def test_a_trial_whose_outcome_was_lost_counts_as_failed_after_its_bound(backend):
    seed_lost_trial(backend)
    [held] = backend.enqueue([dict(processo=PROCESSO, payload="ok")])
    # The bound: cool-down 1 s + timeout 1 s + grace 0.5 s, long past.
    worker = backend.run(
        Downstream().worker(backend, queue_task_timeout=1.0, queue_task_timeout_grace=0.5)
    )
    wait_for(
        lambda: opened(backend) and not breaker(backend)["breaker_trial"],
        10,
        "the lost trial to count as failed (open again, no trial)",
    )
    reopened = backend.now()
    wait_for(lambda: backend.row(held)["status"] == "sucesso", 15, "a new trial")
    assert backend.row(held)["started_at"] >= reopened  # after a new cool-down
    wait_for(lambda: breaker(backend) is None, 5, "the breaker to close")
    assert worker.stop() == 0


@BACKENDS
def test_the_operator_reset_closes_a_stuck_breaker(backend):
    seed_lost_trial(backend)
    with backend.transaction() as conn:
        assert backend.client(conn).reset_breaker(PROCESSO) is True
    assert breaker(backend) is None
    with backend.transaction() as conn:
        assert backend.client(conn).reset_breaker(PROCESSO) is False
        with pytest.raises(ValueError):
            backend.client(conn).reset_breaker(None)
