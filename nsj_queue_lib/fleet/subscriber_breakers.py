"""Circuit breakers per webhook subscriber: the processo breakers (fleet/breakers.py) keyed
by the subscriber instead of the processo.

A subscriber row with ``circuit_breaker_failures`` and ``circuit_breaker_cool_down_s``
(both set; NULL: no breaker) has one: after that many consecutive failed webhook
deliveries to it (an answer other than 2xx, 4xx aside, a timeout, a network error),
across every worker of the queue, no delivery is made to it for the cool-down; then
exactly one delivery, the trial, is made: its success closes the breaker (and its held
deliveries are due at once), its failure opens it again for another cool-down. Other
subscribers' deliveries are not affected.

The state is in the subscriber's row (``breaker_failures``, ``breaker_open``,
``breaker_until``, ``breaker_trial``, ``breaker_trial_at``, ``breaker_trial_task``, as the
limits table holds a processo's), decided with the processo breakers' rules
(``after_failure``, ``after_success``, ``trial_lost``). Unlike a processo's, the claims
do not read it: a delivery claimed while its subscriber's breaker is open is *held*
before any request (``TaskHeld``: its next attempt, with the same ``tentativa``, is
due when the cool-down ends, or after another cool-down while a trial runs). Each
check and each outcome is one short transaction on this worker's own connection,
taken only for subscribers with a breaker (one primary-key read per webhook delivery
tells whether it has one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.db.subscriber_breaker_store import SubscriberBreaker, SubscriberBreakerStore
from nsj_queue_lib.exceptions import TaskHeld
from nsj_queue_lib.fleet.breakers import (
    BreakerState,
    Decision,
    after_failure,
    after_success,
    breaker_problem,
    trial_bound_s,
    trial_lost,
)
from nsj_queue_lib.log import get_logger

logger = get_logger("breakers")

# The start of a held attempt's mensagem (and of its next attempt's mensagem_anterior, by
# which a closing breaker finds the deliveries it held).
HELD_PREFIX = "held by its webhook subscriber's circuit breaker"
SUCCESS, FAILURE, UNDECIDED = "success", "failure", "undecided"
UNREADABLE_PAUSE_S = 60.0
# After a close, the held deliveries are released once more this much later (fleet docs).
RELEASE_AGAIN_S = 0.5


class SubscriberBreakers:
    """The subscribers' breakers as one worker checks and writes them (thread-safe)."""

    def __init__(
        self,
        queue_name: str,
        queue_table: str,
        subscriber_table: str,
        connect: Callable[[], Any],
        call_timeout_s: float,
        grace_s: float,
    ):
        """``connect``: a new connection, not autocommit; ``call_timeout_s``: how long a
        webhook call may take, which with ``grace_s`` bounds an undecided trial."""
        self.queue_name = queue_name
        self.queue_table = queue_table
        self.subscriber_table = subscriber_table
        self._connect = connect
        self.call_timeout_s = call_timeout_s
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._unreadable_until = 0.0
        self._stopped = False  # closed at the worker's stop
        self._refused: set[str] = set()  # subscribers whose settings were refused (logged)
        self._conn: Any = None
        self._store: SubscriberBreakerStore | None = None
        self.opened: dict[str, int] = {}  # times this worker opened each subscriber's breaker
        self.closed: dict[str, int] = {}
        self.open_now: dict[str, bool] = {}  # each breaker as this worker last saw it

    # -- one delivery --

    def deliver(self, subscriber_id: str, task_id: int, call: Callable[[], Any]) -> Any:
        """``call()`` (the webhook call) unless the subscriber's breaker holds the delivery
        (``TaskHeld``); its outcome recorded. ``call`` raises ``WebhookError`` on a failed
        delivery, ``PermanentWebhookError`` on a refused one (neither counts)."""
        from nsj_queue_lib.webhook import PermanentWebhookError, WebhookError

        found = self.admit(subscriber_id, task_id)
        if found is None:
            return call()
        try:
            result = call()
        except PermanentWebhookError:
            self.record(subscriber_id, task_id, found, UNDECIDED)
            raise
        except WebhookError:
            self.record(subscriber_id, task_id, found, FAILURE)
            raise
        self.record(subscriber_id, task_id, found, SUCCESS)
        return result

    def admit(self, subscriber_id: str, task_id: int) -> SubscriberBreaker | None:
        """The subscriber's breaker when it has one and lets this delivery go (closed, or
        this delivery is the trial); None without a breaker (or when it cannot be read:
        logged, the delivery goes). Raises ``TaskHeld`` while it holds the delivery."""
        held: TaskHeld | None = None
        with self._lock:
            if time.monotonic() < self._unreadable_until:
                return None
            try:
                found, held = self._admit(subscriber_id, task_id)
            except Exception as exc:  # noqa: BLE001 - an outage: the delivery goes
                # Not read again for a while: an outage, a subscriber table db_gen
                # --upgrade has not reached, or a database without them (SingleStore)
                # costs one failed statement per UNREADABLE_PAUSE_S, not per delivery.
                logger.warning(
                    "queue=%s: the webhook subscribers' circuit breakers cannot be read (%s); "
                    "deliveries go without them for %g s",
                    *(self.queue_name, exc, UNREADABLE_PAUSE_S),
                )
                self._unreadable_until = time.monotonic() + UNREADABLE_PAUSE_S
                self._let_go()
                return None
        if held is not None:
            raise held
        return found

    def _admit(
        self, subscriber_id: str, task_id: int
    ) -> tuple[SubscriberBreaker | None, TaskHeld | None]:
        conn, store = self._session()
        found = store.find(conn, subscriber_id)
        if found is None or found.failures is None or found.cool_down_s is None:
            conn.commit()
            return None, None
        why = breaker_problem((found.failures, found.cool_down_s))
        if why is not None:
            conn.commit()
            if subscriber_id not in self._refused:
                self._refused.add(subscriber_id)
                logger.warning(
                    "queue=%s: webhook subscriber %r has no circuit breaker: its settings "
                    "circuit_breaker_failures, circuit_breaker_cool_down_s are refused (%s)",
                    *(self.queue_name, subscriber_id, why),
                )
            return None, None
        state, cool_down = found.state, found.cool_down_s
        self.open_now[subscriber_id] = state.open
        if not state.open:
            conn.commit()
            return found, None
        bound = trial_bound_s(cool_down, self.call_timeout_s, self.grace_s)
        if trial_lost(state, bound):
            self._open(conn, store, subscriber_id, cool_down, state.trial_task, bound)
            return found, self._held(subscriber_id, cool_down, "opened again")
        until_s = found.until_s
        cooling = until_s is not None and until_s > 0
        if not state.trial and not cooling and store.take_trial(conn, subscriber_id, task_id):
            conn.commit()
            logger.info(
                "queue=%s: task %d is the circuit breaker trial of webhook subscriber %r",
                *(self.queue_name, task_id, subscriber_id),
            )
            return found, None
        conn.commit()
        if cooling and until_s is not None:
            return found, self._held(subscriber_id, until_s, "open")
        # Another delivery is the trial: held for another cool-down, or until its success
        # makes the held deliveries due.
        return found, self._held(subscriber_id, cool_down, "half-open, its trial decides")

    def _held(self, subscriber_id: str, delay_s: float, why: str) -> TaskHeld:
        return TaskHeld(
            f"{HELD_PREFIX} ({subscriber_id!r}: {why}); next attempt in {delay_s:.3g} s", delay_s
        )

    def _open(
        self,
        conn: Any,
        store: SubscriberBreakerStore,
        subscriber_id: str,
        cool_down: float,
        trial_task: int | None,
        bound: float,
    ) -> None:
        """The trial's outcome never came: it counts as failed, unless decided meanwhile."""
        state = store.state(conn, subscriber_id)
        lost = state is not None and state.trial and state.trial_task == trial_task
        if lost:
            store.open(conn, subscriber_id, cool_down)
        conn.commit()
        if lost:
            why = f"its trial task {trial_task} was not decided within {bound:g} s"
            self._opened(subscriber_id, cool_down, why)

    # -- the outcome --

    def record(
        self, subscriber_id: str, task_id: int, found: SubscriberBreaker, outcome: str
    ) -> None:
        """Write a delivery's outcome. A database error is logged and the outcome dropped
        (a trial's lost outcome counts as failed once its bound has passed)."""
        with self._lock:
            try:
                self._record(subscriber_id, task_id, found, outcome)
            except Exception as exc:  # noqa: BLE001 - an outage: the next outcomes count again
                logger.info(
                    "queue=%s: circuit breaker of webhook subscriber %r not updated: %s",
                    *(self.queue_name, subscriber_id, exc),
                )
                self._let_go()

    def _record(
        self, subscriber_id: str, task_id: int, found: SubscriberBreaker, outcome: str
    ) -> None:
        threshold, cool_down = found.failures, found.cool_down_s
        assert threshold is not None and cool_down is not None
        conn, store = self._session()
        if outcome == FAILURE:
            state = store.fail(conn, subscriber_id)
            opens = state is not None and after_failure(state, threshold, task_id) == Decision.OPEN
            if opens:
                store.open(conn, subscriber_id, cool_down)
            conn.commit()
            if opens and state is not None:
                why = (
                    "its trial delivery failed"
                    if state.open
                    else f"{state.failures} consecutive failed deliveries"
                )
                self._opened(subscriber_id, cool_down, why)
            return
        if outcome == UNDECIDED:
            was_trial = found.state.open and store.undecided(conn, subscriber_id, task_id)
            conn.commit()
            if was_trial:
                logger.info(
                    "queue=%s: the circuit breaker trial of webhook subscriber %r (task %d) "
                    "ended without an outcome; the next delivery is the trial",
                    *(self.queue_name, subscriber_id, task_id),
                )
            return
        state = store.state(conn, subscriber_id)
        closes = state is not None and after_success(state, task_id) == Decision.CLOSE
        released = store.close(conn, subscriber_id, HELD_PREFIX) if closes else 0
        conn.commit()
        if closes and state is not None and state.open:
            # A delivery held while the trial ran may commit its next attempt just after
            # this release: a second one catches it.
            again = threading.Timer(RELEASE_AGAIN_S, self._release_again, (subscriber_id,))
            again.daemon = True
            again.start()
            self.closed[subscriber_id] = self.closed.get(subscriber_id, 0) + 1
            self.open_now[subscriber_id] = False
            logger.warning(
                "queue=%s: circuit breaker of webhook subscriber %r closed (its trial delivery "
                "succeeded); %d held deliveries due now",
                *(self.queue_name, subscriber_id, released),
            )

    def _release_again(self, subscriber_id: str) -> None:
        """The held deliveries due now, once more, unless the breaker opened again."""
        with self._lock:
            if self._stopped:
                return
            try:
                conn, store = self._session()
                state = store.state(conn, subscriber_id)
                released = 0
                if state is not None and not state.open:
                    released = store.release(conn, subscriber_id, HELD_PREFIX)
                conn.commit()
            except Exception as exc:  # noqa: BLE001 - they go at their scheduled time
                logger.info(
                    "queue=%s: the held deliveries of webhook subscriber %r not released: %s",
                    *(self.queue_name, subscriber_id, exc),
                )
                self._let_go()
                return
        if released:
            logger.info(
                "queue=%s: %d more held deliveries of webhook subscriber %r due now",
                *(self.queue_name, released, subscriber_id),
            )

    def _opened(self, subscriber_id: str, cool_down: float, why: str) -> None:
        self.opened[subscriber_id] = self.opened.get(subscriber_id, 0) + 1
        self.open_now[subscriber_id] = True
        logger.warning(
            "queue=%s: circuit breaker of webhook subscriber %r opened for %g s (%s)",
            *(self.queue_name, subscriber_id, cool_down, why),
        )

    # -- the connection --

    def breakers(self) -> list[tuple[BreakerState, float | None]]:
        """The subscribers' breakers with failures counted, or open (nsjq status)."""
        with self._lock:
            conn, store = self._session()
            try:
                return store.breakers(conn)
            finally:
                conn.commit()

    def _session(self) -> tuple[Any, SubscriberBreakerStore]:
        if self._conn is None:
            self._conn = self._connect()
            self._store = SubscriberBreakerStore(
                self._conn, self.queue_table, self.subscriber_table
            )
        assert self._store is not None
        return self._conn, self._store

    def _let_go(self) -> None:
        if self._conn is not None:
            close_quietly(self._conn)
        self._conn, self._store = None, None

    def close(self) -> None:
        with self._lock:
            self._stopped = True
            self._let_go()
