"""Circuit breakers (issue 43, CONTRACT.md section 8): ``@Task(circuit_breaker=(failures,
cool_down_s))``. After N consecutive failures no task of the processo starts for the
cool-down; then exactly one trial task runs: its success closes the breaker, its failure
opens it again. The state is in the database, read by every claim: cluster-wide. The
dead letters of the failed tasks (execute_dead) are never the trial.
PostgreSQL (direct and through the socket server) and MariaDB.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from nsj_queue_lib import Task, WorkerBase
from tests.contract.backends import seconds
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)

WITH_BREAKERS = pytest.mark.parametrize(
    "backend",
    ["postgres", "postgres-via-server", pytest.param("mysql", marks=pytest.mark.mysql)],
    indirect=True,
)
LIMITS_WORKER = Path(__file__).parent / "workers" / "limits_worker.py"
PROCESSO = "fragil"
COOL_DOWN_S = 2.0
WAKE_UP_BOUND_S = 1.5


class Downstream:
    """The handler's downstream: failing or not, and the tasks it was called for."""

    def __init__(self) -> None:
        self.failing = True
        self.calls: list[int] = []
        self.lock = threading.Lock()

    def worker(self, backend) -> WorkerBase:
        downstream = self

        class Fragile(WorkerBase):
            @Task(PROCESSO, max_retry=1, circuit_breaker=(3, COOL_DOWN_S))
            def call(self, payload, tarefa, bd_conn):
                with downstream.lock:
                    downstream.calls.append(tarefa["id"])
                if downstream.failing:
                    raise RuntimeError("downstream answered 500")
                return "ok"

            def execute_dead(self, payload, tarefa, bd_conn):
                return "noted"

        return Fragile(backend.settings(queue_concurrency=1))


def breaker(backend) -> dict | None:
    found = backend.query(f"SELECT * FROM {backend.table}_limits WHERE processo = %s", (PROCESSO,))
    return found[0] if found else None


def opened(backend) -> bool:
    row = breaker(backend)
    return row is not None and bool(row["breaker_open"])


def started(backend, ids) -> list:
    return [backend.row(t)["started_at"] for t in ids if backend.row(t)["started_at"]]


@WITH_BREAKERS
def test_the_breaker_opens_holds_the_processo_and_one_trial_closes_it(backend):
    downstream = Downstream()
    worker = backend.run(downstream.worker(backend))
    backend.enqueue([dict(processo=PROCESSO) for _ in range(3)])
    wait_for(lambda: opened(backend), 10, "the breaker to open after 3 failures")
    opened_row = breaker(backend)
    downstream.failing = False
    held = backend.enqueue([dict(processo=PROCESSO) for _ in range(4)])
    other = backend.enqueue([dict(processo="outro")])  # another processo is not held back
    wait_for(lambda: all(backend.row(t)["status"] == "sucesso" for t in held), 20, "the trial")
    assert backend.row(other[0])["status"] in ("pendente", "sucesso")
    assert worker.stop() == 0
    starts = sorted(started(backend, held))
    # Nothing started during the cool-down; the trial started within the wake-up bound
    # after it, and the next task only after the trial ended.
    assert starts[0] >= opened_row["breaker_until"]
    assert seconds(starts[0] - opened_row["breaker_until"]) < WAKE_UP_BOUND_S
    trial = min(held, key=lambda t: backend.row(t)["started_at"])
    assert starts[1] >= backend.row(trial)["finished_at"]
    assert breaker(backend) is None  # closed: the row is gone


@WITH_BREAKERS
def test_a_failed_trial_opens_the_breaker_again(backend):
    downstream = Downstream()
    worker = backend.run(downstream.worker(backend))
    first = backend.enqueue([dict(processo=PROCESSO) for _ in range(3)])
    wait_for(lambda: opened(backend), 10, "the breaker to open after 3 failures")
    until = breaker(backend)["breaker_until"]
    held = backend.enqueue([dict(processo=PROCESSO) for _ in range(3)])
    wait_for(
        lambda: opened(backend) and breaker(backend)["breaker_until"] > until,
        15,
        "the trial to fail and the breaker to open again",
    )
    # Exactly one trial ran: three failures, then one call.
    assert len(downstream.calls) == 4 and downstream.calls[:3] == first
    assert len(started(backend, held)) == 1
    row = breaker(backend)
    assert row["breaker_trial"] in (0, False)
    assert seconds(row["breaker_until"] - until) >= COOL_DOWN_S
    assert worker.stop() == 0


@WITH_BREAKERS
def test_two_worker_processes_share_the_breaker_and_its_one_trial(backend):
    """Cluster-wide: the failures of either process open the breaker, both hold the
    processo for the cool-down, and one trial in the whole cluster decides."""
    spec = {PROCESSO: {"circuit_breaker": [3, COOL_DOWN_S], "max_retry": 1}}
    procs = [
        backend.start_process(
            f"brk{i}",
            wait_ready=False,
            script=LIMITS_WORKER,
            LIMITS_SPEC=json.dumps(spec),
            QUEUE_CONCURRENCY="1",
        )
        for i in range(2)
    ]
    backend.wait_processes_ready(procs)
    failing = backend.enqueue(
        [dict(processo=PROCESSO, payload=json.dumps({"fail_on": [1]})) for _ in range(3)]
    )
    wait_for(lambda: opened(backend), 15, "the breaker to open after 3 failures")
    opened_row = breaker(backend)
    held = backend.enqueue(
        [dict(processo=PROCESSO, payload=json.dumps({"started": True})) for _ in range(4)]
    )
    wait_for(lambda: all(backend.row(t)["status"] == "sucesso" for t in held), 30, "the held tasks")
    assert all(backend.row(t)["status"] != "pendente" for t in failing)
    starts = sorted(started(backend, held))
    # Neither process started one during the cool-down; the one trial ran alone, in
    # whichever process claimed it, and the others only after it ended.
    assert starts[0] >= opened_row["breaker_until"]
    assert seconds(starts[0] - opened_row["breaker_until"]) < WAKE_UP_BOUND_S
    trial = min(held, key=lambda t: backend.row(t)["started_at"])
    assert starts[1] >= backend.row(trial)["finished_at"]
    assert breaker(backend) is None
    ran_in = {r["pid"] for r in backend.exec_rows()}
    assert ran_in <= {p.proc.pid for p in procs}
