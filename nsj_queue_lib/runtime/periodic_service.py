"""Periodic tasks: every worker of a queue enqueues the due slots; one of them wins each.

No cluster lock elects a leader: each worker, when a slot falls due, moves
its processo's ``last_slot`` forward with a conditional UPDATE and inserts the
slot's task in the same transaction (``db/periodic_store.py``). The row lock
serialises the workers: the first commits the task, the others find the slot
taken and write nothing. A worker killed before its commit takes its
transaction with it, and a waiting worker's UPDATE then moves the slot and
enqueues it, so the schedule survives ``kill -9`` and never doubles. The same
statements run on every dialect and under CLIENT_SERVER_MODE (the database
decides, not a lock service).

Only the latest slot due is ever enqueued: slots missed while no worker ran
are not replayed, and a processo seen for the first time starts at the next
slot. Between slots the thread sleeps until the next one (at most
``MAX_SLEEP_SECONDS``, so a clock step is noticed); database errors are logged
and retried with back-off.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Sequence
from typing import Any

from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.db.periodic_store import PeriodicStore
from nsj_queue_lib.db.queue_store import QueueStore
from nsj_queue_lib.flow.periodic import UTC, PeriodicSchedule, slot_key
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.settings import Settings
from nsj_queue_lib.task_rows import task_row

logger = get_logger("periodic")

MAX_SLEEP_SECONDS = 60.0
BACKOFF_START_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 30.0
ORIGEM = "nsj_queue_lib.periodic"


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(UTC)


def slot_task_row(
    schedule: PeriodicSchedule, slot: datetime.datetime, queue_name: str
) -> dict[str, Any]:
    """The task of ``schedule``'s ``slot`` (also what ``InMemoryQueue.enqueue_slot`` inserts):
    the client's checks and row shape, as ``insert_task`` would write it."""
    return task_row(
        {
            "origem": ORIGEM,
            "destino": queue_name,
            "processo": schedule.processo,
            "chave_externa": slot.isoformat(),
            "payload": schedule.task_payload(slot),
        },
        pub_sub=False,
    )


class PeriodicEnqueuer:
    name = "periodic"

    def __init__(
        self,
        settings: Settings,
        store: QueueStore,
        periodic_store: PeriodicStore,
        connect: Callable[[], Any],
        schedules: Sequence[PeriodicSchedule],
        stop: threading.Event,
        clock: Callable[[], datetime.datetime] = utc_now,
    ):
        self.settings = settings
        self.store = store
        self.periodic_store = periodic_store
        self._connect = connect  # a new connection, not autocommit
        self.schedules = list(schedules)
        self.stop = stop
        self.clock = clock  # aware; tests drive it
        self._registered = False
        self._done: dict[str, datetime.datetime] = {}  # processo -> latest slot seen taken
        self.enqueued_total = 0

    def run(self) -> None:
        names = ", ".join(f"{s.processo} ({s.describe()})" for s in self.schedules)
        logger.info("queue=%s: periodic tasks: %s", self.settings.queue_name, names)
        backoff = BACKOFF_START_SECONDS
        while not self.stop.is_set():
            try:
                self.run_once()
                backoff = BACKOFF_START_SECONDS
                wait = self.seconds_to_next_slot()
            except Exception as exc:  # noqa: BLE001 - an outage must not end the schedule
                logger.warning(
                    "queue=%s: periodic enqueue failed (%s); retrying in %.0f s",
                    self.settings.queue_name,
                    str(exc).strip(),
                    backoff,
                )
                wait, backoff = backoff, min(backoff * 2, BACKOFF_MAX_SECONDS)
            self.stop.wait(wait)

    def seconds_to_next_slot(self) -> float:
        now = self.clock()
        # A slot that fell due while the last round ran (a lock wait, a slow database) is
        # enqueued now: sleeping until the next one would skip it for good.
        if any(self._done.get(s.processo) != s.latest_due(now) for s in self.schedules):
            return 0.0
        upcoming = min(s.next_after(now) for s in self.schedules)
        return min(max((upcoming - now).total_seconds(), 0.0), MAX_SLEEP_SECONDS)

    def run_once(self) -> list[int]:
        """Register the processos (once), then enqueue each one's latest due slot unless a
        worker did; the ids of the tasks this call enqueued."""
        if not self._registered:
            self._register()
        now = self.clock()
        enqueued = []
        for schedule in self.schedules:
            slot = schedule.latest_due(now)
            if self._done.get(schedule.processo) == slot:
                continue
            task_id = self.enqueue(schedule, slot)
            self._done[schedule.processo] = slot
            if task_id is not None:
                enqueued.append(task_id)
        return enqueued

    def _register(self) -> None:
        now = self.clock()
        conn = self._connect()
        try:
            for schedule in self.schedules:
                slot = slot_key(schedule.latest_due(now))
                self.periodic_store.register(conn, schedule.processo, slot)
            conn.commit()
        finally:
            close_quietly(conn)
        self._registered = True

    def enqueue(self, schedule: PeriodicSchedule, slot: datetime.datetime) -> int | None:
        """The slot's task, in one transaction with the slot's marker; None when the slot
        was taken already (by this worker or another)."""
        conn = self._connect()
        try:
            if not self.periodic_store.take_slot(conn, schedule.processo, slot_key(slot)):
                conn.rollback()
                return None
            row = slot_task_row(schedule, slot, self.settings.queue_name)
            task_id = self.store.insert_task(conn, row)
            self.periodic_store.record_task(conn, schedule.processo, task_id)
            conn.commit()
        finally:
            close_quietly(conn)
        self.enqueued_total += 1
        logger.info(
            "queue=%s task=%s: enqueued periodic %s for slot %s",
            self.settings.queue_name,
            task_id,
            schedule.processo,
            slot.isoformat(),
        )
        return task_id
