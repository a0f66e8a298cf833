"""The thread that keeps a worker's circuit breakers (fleet/breakers.py) in the database.

The runtime reports every finished attempt to its observer; this one queues the
outcomes of the processos with a breaker and writes them from its own thread and
connection, each in a short transaction of its own, so that an attempt's commit never
waits for a breaker. A failure counts one more consecutive failure and opens the
breaker at the threshold (or opens it again when it was the trial); a success of a
processo whose breaker has failures or is open resets it (closing it when it was the
trial). Successes of a processo with nothing counted cost nothing: the thread reads
the breakers with failures once a second and writes only for those.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.db.pause_store import BreakerStore
from nsj_queue_lib.fleet.breakers import Decision, after_failure, after_success
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.observability import observer as outcomes
from nsj_queue_lib.observability.observer import Observer

logger = get_logger("breakers")

REFRESH_SECONDS = 1.0
# Outcomes that count: a failed attempt (retried or not), a rescued one; a success.
_FAILED = frozenset({outcomes.FALHA, outcomes.DEAD, outcomes.RESCUED})


class BreakerRecorder(Observer):
    def __init__(
        self,
        queue_name: str,
        queue_table: str,
        breakers: Mapping[str, tuple[int, float]],
        connect: Callable[[], Any],
        stop: threading.Event,
    ):
        self.queue_name = queue_name
        self.queue_table = queue_table
        self.breakers = dict(breakers)
        self._connect = connect  # a new connection, not autocommit
        self.stop = stop
        self.worker_name = "nsj_queue_lib worker"  # the runtime sets its registry's name
        # Called after a breaker opened or closed (the runtime wakes its claims).
        self.on_change: Callable[[], None] = lambda: None
        self._events: queue.SimpleQueue[tuple[str, bool]] = queue.SimpleQueue()
        self._conn: Any = None
        self._store: BreakerStore | None = None
        self.dirty: set[str] = set()  # processos with failures counted, or open
        self.states: list[Any] = []  # the breakers as last read (BreakerState)
        self._refreshed = 0.0
        # Read often enough that a breaker opened by another worker is known here before
        # its cool-down ends and its trial can run (the trial's success must be written).
        self.refresh_seconds = min([REFRESH_SECONDS, *(c / 2 for _, c in self.breakers.values())])
        self.opened: dict[str, int] = {}  # times each breaker opened, from this worker
        self.closed: dict[str, int] = {}

    # -- the observer: called by executors; only queues --

    def task_finished(self, task: TaskRecord, outcome: str) -> None:
        processo = task.row.get("processo")
        # A dead letter runs execute_dead, not the processo's handler: it tells nothing.
        if (
            not task.dead
            and processo in self.breakers
            and (outcome in _FAILED or outcome == outcomes.SUCESSO)
        ):
            self._events.put((processo, outcome == outcomes.SUCESSO))

    # -- the thread --

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    event = self._events.get(timeout=self.refresh_seconds / 2)
                except queue.Empty:
                    event = None
                self.record_once(event)
        finally:
            self._let_go()

    def record_once(self, event: tuple[str, bool] | None) -> None:
        """Refresh which breakers have failures (once a second), then write ``event``.
        A database error is logged and the outcome dropped: a breaker counts
        approximately, it never stops the worker."""
        try:
            if time.monotonic() - self._refreshed >= self.refresh_seconds:
                self._refresh()
            if event is not None:
                processo, ok = event
                if ok:
                    self._success(processo)
                else:
                    self._failure(processo)
        except Exception as exc:  # noqa: BLE001 - an outage: the next outcomes count again
            logger.info("queue=%s: circuit breaker not updated: %s", self.queue_name, exc)
            self._let_go()

    def _session(self) -> tuple[Any, BreakerStore]:
        if self._conn is None:
            self._conn = self._connect()
            self._store = BreakerStore(self._conn, self.queue_table)
        assert self._store is not None
        return self._conn, self._store

    def _refresh(self) -> None:
        conn, store = self._session()
        states = store.breakers(conn)
        conn.commit()
        self.states = [s for s in states if s.processo in self.breakers]
        self.dirty = {s.processo for s in self.states}
        self._refreshed = time.monotonic()

    def _failure(self, processo: str) -> None:
        threshold, cool_down = self.breakers[processo]
        conn, store = self._session()
        state = store.fail(conn, processo, self.worker_name)
        decision = after_failure(state, threshold)
        if decision == Decision.OPEN:
            store.open(conn, processo, cool_down)
        conn.commit()
        self.dirty.add(processo)
        if decision == Decision.OPEN:
            self.opened[processo] = self.opened.get(processo, 0) + 1
            self.on_change()
            why = (
                "its trial task failed" if state.open else f"{state.failures} consecutive failures"
            )
            logger.warning(
                "queue=%s: circuit breaker of processo %r opened for %g s (%s)",
                *(self.queue_name, processo, cool_down, why),
            )

    def _success(self, processo: str) -> None:
        if processo not in self.dirty:
            return
        conn, store = self._session()
        state = store.state(conn, processo)
        decision = Decision.NOTHING if state is None else after_success(state)
        if decision == Decision.CLOSE:
            store.close(conn, processo)
        conn.commit()
        if decision == Decision.CLOSE:
            self.on_change()
            if state is not None and state.open:
                self.closed[processo] = self.closed.get(processo, 0) + 1
                logger.warning(
                    "queue=%s: circuit breaker of processo %r closed (its trial task succeeded)",
                    self.queue_name,
                    processo,
                )
            self.dirty.discard(processo)

    def _let_go(self) -> None:
        if self._conn is not None:
            close_quietly(self._conn)
        self._conn, self._store = None, None
