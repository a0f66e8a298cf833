"""The thread that keeps a worker's circuit breakers (fleet/breakers.py) in the database.

The runtime reports every finished attempt to its observer; this one queues the
outcomes of the processos with a breaker and writes them from its own thread and
connection, each in a short transaction of its own, so that an attempt's commit never
waits for a breaker. A failure counts one more consecutive failure and opens the
breaker at the threshold (or opens it again when it was the trial); a success of a
processo whose breaker has failures or is open resets it (closing it when it was the
trial). Successes of a processo with nothing counted cost nothing: the thread reads
the breakers with failures once a second and writes only for those.

While a breaker is open only its trial task's outcome decides (fleet/breakers.py): a
cancelled, released or given-up trial is undecided and lets another trial start. An
outcome this queue loses (the worker killed after the trial's commit, a database error
while writing it) is made up for by that read: a trial undecided for longer than
``trial_bound_s`` counts as failed, by whichever worker with the breaker sees it first.
At the worker's stop the thread writes what is queued (the outcomes of the tasks that
ended in the grace period) before it ends.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.db.pause_store import BreakerStore
from nsj_queue_lib.fleet.breakers import (
    BreakerState,
    Decision,
    after_failure,
    after_success,
    trial_bound_s,
    trial_lost,
)
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.observability import observer as outcomes
from nsj_queue_lib.observability.observer import Observer
from nsj_queue_lib.settings import Settings

logger = get_logger("breakers")

REFRESH_SECONDS = 1.0
# Outcomes that count: a failed attempt (retried or not), a rescued one; a success.
_FAILED = frozenset({outcomes.FALHA, outcomes.DEAD, outcomes.RESCUED})
# Attempts that ended without telling whether the processo works: a trial that ends so is
# undecided (another trial may start).
_UNDECIDED = frozenset({outcomes.CANCELADA, outcomes.RELEASED})
SUCCESS, FAILURE, UNDECIDED = "success", "failure", "undecided"
# One outcome to write: (processo, the attempt's id, SUCCESS, FAILURE or UNDECIDED).
Event = tuple[str, int, str]


class BreakerRecorder(Observer):
    def __init__(
        self,
        settings: Settings,
        breakers: Mapping[str, tuple[int, float]],
        connect: Callable[[], Any],
        timeout_for: Callable[[str], float | None],
    ):
        """``connect``: a new connection, not autocommit; ``timeout_for``: how long an
        attempt of a processo may run (runtime/timeouts.py), which with the grace before it
        is given up bounds an undecided trial (fleet/breakers.py)."""
        self.queue_name = settings.queue_name
        self.queue_table = settings.queue_table
        self.breakers = dict(breakers)
        self._connect = connect
        self.timeout_for = timeout_for
        self.grace_s = settings.queue_task_timeout_grace
        # Set by the runtime once its executors ended (finish): the thread writes what is
        # queued, then ends. Not the worker's stop event: tasks still end after it.
        self.finished = threading.Event()
        self.worker_name = "nsj_queue_lib worker"  # the runtime sets its registry's name
        # Called after a breaker opened or closed (the runtime wakes its claims).
        self.on_change: Callable[[], None] = lambda: None
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()
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
        if outcome == outcomes.SUCESSO:
            self._queue(task, SUCCESS)
        elif outcome in _FAILED:
            self._queue(task, FAILURE)
        elif outcome in _UNDECIDED:
            self._queue(task, UNDECIDED)

    def attempt_abandoned(self, task: TaskRecord, why: str) -> None:
        # Given up after its timeout (settled as failed elsewhere), or rescued by another
        # worker (whose retry service reports it): no outcome from here.
        self._queue(task, UNDECIDED)

    def _queue(self, task: TaskRecord, kind: str) -> None:
        processo = task.row.get("processo")
        # A dead letter runs execute_dead, not the processo's handler: it tells nothing.
        if not task.dead and processo in self.breakers:
            self._events.put((processo, int(task.id), kind))

    # -- the thread --

    def finish(self) -> None:
        """No attempt runs any more: write what is queued, then end the thread."""
        self.finished.set()

    def run(self) -> None:
        try:
            while not self.finished.is_set():
                try:
                    event: Event | None = self._events.get(timeout=self.refresh_seconds / 2)
                except queue.Empty:
                    event = None
                self.record_once(event)
            self.drain()
        finally:
            self._let_go()

    def drain(self) -> None:
        """Write every queued outcome."""
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            self.record_once(event)

    def record_once(self, event: Event | None) -> None:
        """Refresh which breakers have failures (once a second), then write ``event``.
        A database error is logged and the outcome dropped: a breaker counts
        approximately, it never stops the worker (a trial's lost outcome counts as a
        failure once its bound has passed)."""
        try:
            if time.monotonic() - self._refreshed >= self.refresh_seconds:
                self._refresh()
            if event is not None:
                processo, task_id, kind = event
                if kind == SUCCESS:
                    self._success(processo, task_id)
                elif kind == FAILURE:
                    self._failure(processo, task_id)
                else:
                    self._undecided(processo, task_id)
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
        for state in self.states:
            if trial_lost(state, self.trial_bound(state)):
                self._trial_lost(state)

    def trial_bound(self, state: BreakerState) -> float:
        """How long ``state``'s trial may stay undecided (fleet/breakers.py)."""
        timeout = state.trial_timeout_s
        if timeout is None:
            timeout = self.timeout_for(state.processo)
        return trial_bound_s(self.breakers[state.processo][1], timeout, self.grace_s)

    def _trial_lost(self, seen: BreakerState) -> None:
        """The trial's outcome never came: it counts as failed (opened again), unless
        another worker decided it since the read."""
        cool_down = self.breakers[seen.processo][1]
        conn, store = self._session()
        state = store.state(conn, seen.processo)
        lost = state is not None and state.trial and state.trial_task == seen.trial_task
        if lost:
            store.open(conn, seen.processo, cool_down)
        conn.commit()
        if lost:
            self._opened(
                seen.processo,
                cool_down,
                f"its trial task {seen.trial_task} was not decided within "
                f"{self.trial_bound(seen):g} s",
            )

    def _opened(self, processo: str, cool_down: float, why: str) -> None:
        self.opened[processo] = self.opened.get(processo, 0) + 1
        self.on_change()
        logger.warning(
            "queue=%s: circuit breaker of processo %r opened for %g s (%s)",
            *(self.queue_name, processo, cool_down, why),
        )

    def _failure(self, processo: str, task_id: int) -> None:
        threshold, cool_down = self.breakers[processo]
        conn, store = self._session()
        state = store.fail(conn, processo, self.worker_name)
        decision = after_failure(state, threshold, task_id)
        if decision == Decision.OPEN:
            store.open(conn, processo, cool_down)
        conn.commit()
        self.dirty.add(processo)
        if decision == Decision.OPEN:
            why = (
                "its trial task failed" if state.open else f"{state.failures} consecutive failures"
            )
            self._opened(processo, cool_down, why)

    def _undecided(self, processo: str, task_id: int) -> None:
        """An attempt ended without an outcome: if it was the trial, another may start."""
        if processo not in self.dirty:
            return
        conn, store = self._session()
        was_trial = store.undecided(conn, processo, task_id)
        conn.commit()
        if was_trial:
            self.on_change()
            logger.info(
                "queue=%s: the circuit breaker trial of processo %r (task %d) ended without "
                "an outcome; another task is the trial",
                *(self.queue_name, processo, task_id),
            )

    def _success(self, processo: str, task_id: int) -> None:
        if processo not in self.dirty:
            return
        conn, store = self._session()
        state = store.state(conn, processo)
        decision = Decision.NOTHING if state is None else after_success(state, task_id)
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
