"""Periodic tasks (docs/periodic-tasks.md) on PostgreSQL (direct and through the socket
server) and MariaDB.

One task per slot across every worker of the queue, none for a slot already
taken (a second worker, a restart), only the latest due slot after a gap, and
a worker that dies inside its enqueuing transaction leaves the slot to another.
The enqueuers are driven by a clock the test sets; the worker-process test uses
``every_s=1`` and ``kill -9``.
"""

from __future__ import annotations

import datetime
import json
import threading
from pathlib import Path

import pytest

from nsj_queue_lib.db.driver import make_driver
from nsj_queue_lib.db.periodic_store import PeriodicStore
from nsj_queue_lib.flow.periodic import PeriodicSchedule, slot_key
from nsj_queue_lib.runtime.periodic_service import PeriodicEnqueuer
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(90)

UTC = datetime.timezone.utc
PERIODIC_SCRIPT = Path(__file__).resolve().parent / "workers" / "periodic_worker.py"
PERIODIC_BACKENDS = pytest.mark.parametrize(
    "backend",
    ["postgres", "postgres-via-server", pytest.param("mysql", marks=pytest.mark.mysql)],
    indirect=True,
)
# The enqueuers talk to the database only, whether or not the workers use a socket server.
DATABASE_BACKENDS = pytest.mark.parametrize(
    "backend", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True
)
TICK = PeriodicSchedule("tick", cron="*/5 * * * *", payload={"k": 1})


class Clock:
    def __init__(self, now: datetime.datetime):
        self.now = now

    def __call__(self) -> datetime.datetime:
        return self.now


def at(hour: int, minute: int, second: float = 0) -> datetime.datetime:
    return datetime.datetime(2026, 11, 24, hour, minute, tzinfo=UTC) + datetime.timedelta(
        seconds=second
    )


def enqueuer(backend, clock: Clock, schedules=(TICK,)) -> PeriodicEnqueuer:
    """What a worker of ``backend`` runs in its periodic thread, on its own connections."""
    settings = backend.settings()
    driver = make_driver(settings)
    return PeriodicEnqueuer(
        settings,
        driver.store(),
        PeriodicStore(driver.name, settings.queue_table),
        lambda: driver.connect(autocommit=False),
        schedules,
        threading.Event(),
        clock=clock,
    )


def periodic_rows(backend) -> list[dict]:
    return backend.query(f"SELECT * FROM {backend.table}_periodic ORDER BY processo")


@DATABASE_BACKENDS
def test_one_task_per_slot_across_workers_restarts_and_gaps(backend):
    clock = Clock(at(8, 47, 13))
    a, b = enqueuer(backend, clock), enqueuer(backend, clock)
    # The slot due when the schedule is first seen (08:45) is not enqueued.
    assert a.run_once() == [] and b.run_once() == []
    assert backend.rows() == []
    clock.now = at(8, 50, 0.2)
    assert len(a.run_once() + b.run_once()) == 1
    assert b.run_once() == a.run_once() == []  # nothing twice from one worker either
    # Nobody ran through 08:55 and 09:00: only the latest due slot, 09:05, follows.
    clock.now = at(9, 7)
    assert len(b.run_once()) == 1
    # A restarted worker (a new enqueuer, nothing in memory) finds the slot taken, even
    # once its task has finished (when a dedupe_key would be free again).
    backend.execute(f"UPDATE {backend.table} SET status = 'sucesso'")
    assert enqueuer(backend, clock).run_once() == []
    rows = backend.rows()
    assert [r["chave_externa"] for r in rows] == [
        "2026-11-24T08:50:00+00:00",
        "2026-11-24T09:05:00+00:00",
    ]
    assert {r["processo"] for r in rows} == {"tick"}
    assert json.loads(rows[1]["payload"]) == {"k": 1, "slot": "2026-11-24T09:05:00+00:00"}
    [marker] = periodic_rows(backend)
    assert (marker["last_slot"], marker["task_id"]) == (slot_key(at(9, 5)), rows[1]["id"])
    # The sleep after a round (a's finds 09:05 taken): 09:10 is 3 minutes away, capped at
    # a minute. (Before its round, a's sleep is none: 09:05 is due and not looked at.)
    assert a.seconds_to_next_slot() == 0.0
    assert a.run_once() == []
    assert a.seconds_to_next_slot() == 60.0
    clock.now = at(9, 9, 59.5)
    assert a.seconds_to_next_slot() == pytest.approx(0.5)


@DATABASE_BACKENDS
def test_a_worker_dying_inside_its_enqueuing_transaction_leaves_the_slot_to_another(backend):
    clock = Clock(at(8, 47))
    survivor = enqueuer(backend, clock)
    survivor.run_once()
    driver = make_driver(backend.settings())
    store = PeriodicStore(driver.name, backend.table)
    # The victim took the slot and would insert its task next; it holds the row's lock.
    victim = driver.connect(autocommit=False)
    assert store.take_slot(victim, "tick", slot_key(at(8, 50)))
    clock.now = at(8, 50, 0.1)
    enqueued: list[int] = []
    waiting = threading.Thread(target=lambda: enqueued.extend(survivor.run_once()))
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive(), "the survivor must wait for the victim's transaction"
    assert backend.rows() == []
    victim.close()  # its connection dies: the transaction rolls back, the lock goes
    waiting.join(15)
    assert not waiting.is_alive()
    assert [r["id"] for r in backend.rows()] == enqueued and len(enqueued) == 1


@DATABASE_BACKENDS
def test_a_slot_that_fell_due_while_enqueuing_is_enqueued_without_sleeping(backend):
    """An enqueue that took long (a lock wait, a slow database) must not sleep through a
    slot that fell due meanwhile: it was skipped for good once the next one came."""
    often = PeriodicSchedule("often", every_s=60)
    clock = Clock(at(8, 47, 10))
    a = enqueuer(backend, clock, (often,))
    a.run_once()  # registers 08:47
    clock.now = at(8, 48, 0.1)
    assert len(a.run_once()) == 1  # 08:48
    clock.now = at(8, 49, 2)  # the 08:49 slot came while the enqueue ran
    assert a.seconds_to_next_slot() == 0.0
    assert len(a.run_once()) == 1
    assert a.seconds_to_next_slot() == pytest.approx(58.0)
    assert [r["chave_externa"] for r in backend.rows()] == [
        "2026-11-24T08:48:00+00:00",
        "2026-11-24T08:49:00+00:00",
    ]


@PERIODIC_BACKENDS
def test_a_worker_runs_its_periodic_processo(backend):
    """The in-process worker's periodic thread enqueues, and its executors run the task
    (on the socket-server path too)."""
    from tests.contract.workers.periodic_worker import PeriodicWorker

    worker = PeriodicWorker(
        backend.settings(),
        exec_table=backend.exec_table,
        started_table=backend.started_table,
        ready_file="",
    )
    backend.run(worker)
    wait_for(lambda: backend.statuses().get("sucesso", 0) >= 2, 15, "two ticks to run")
    rows = backend.rows("status = 'sucesso'")
    assert all(r["processo"] == "tick" for r in rows)
    assert all(json.loads(r["payload"])["source"] == "periodic_worker" for r in rows)


@DATABASE_BACKENDS
@pytest.mark.slow
def test_worker_processes_share_the_schedule_and_survive_a_kill_9(backend):
    procs = [
        backend.start_process(f"w{i}", wait_ready=False, script=PERIODIC_SCRIPT) for i in range(2)
    ]
    backend.wait_processes_ready(procs)

    def ticks_after(moment: datetime.datetime | None) -> int:
        rows = backend.rows("status = 'sucesso'")
        return sum(1 for r in rows if moment is None or r["data_hora_inicial"] > moment)

    wait_for(lambda: ticks_after(None) >= 2, 20, "two ticks from two workers")
    procs[0].kill9()
    killed_at = backend.now()
    wait_for(lambda: ticks_after(killed_at) >= 2, 20, "the survivor to keep the schedule")
    # A worker (re)started mid-schedule joins without doubling a slot.
    backend.start_process("w2", script=PERIODIC_SCRIPT)
    joined_at = backend.now()
    wait_for(lambda: ticks_after(joined_at) >= 2, 20, "two more ticks")
    slots = [r["chave_externa"] for r in backend.rows("id_inicial IS NULL")]
    assert len(slots) == len(set(slots)), slots
    executions = [r["chave"] for r in backend.exec_rows()]
    assert len(executions) == len(set(executions)), executions


@DATABASE_BACKENDS
def test_a_worker_with_schedules_refuses_a_queue_without_the_periodic_table(backend):
    from tests.contract.workers.periodic_worker import PeriodicWorker

    backend.execute(f"DROP TABLE {backend.table}_periodic")
    worker = PeriodicWorker(
        backend.settings(), exec_table=backend.exec_table, started_table=backend.started_table
    )
    assert worker.run_until_stopped(install_signal_handlers=False) == 2
    message = worker._runtime.exit_message
    assert f"periodic table {backend.table}_periodic is missing" in message
    assert "--upgrade" in message
