"""The runtime's parts, measured: a liveness (claims, completions), a listener, a handler.

Each wrapper has the surface of what it wraps and reports to an ``Observer``;
the runtime wraps its parts only when metrics are on, so a worker without
``QUEUE_METRICS_PORT`` runs exactly the code it ran before. ``Contact``
records what ``/readyz`` needs: whether the dispatcher's connection is up and
when its loop last completed a round trip with the database.
"""

from __future__ import annotations

import datetime
import inspect
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from nsj_queue_lib.context import current_task
from nsj_queue_lib.exceptions import NoCurrentTaskError
from nsj_queue_lib.model import Claim, TaskRecord
from nsj_queue_lib.notify import HALT_PAYLOAD, SCHEDULED_PAYLOAD
from nsj_queue_lib.observability.observer import Observer
from nsj_queue_lib.process.ids import process_id_of

if TYPE_CHECKING:
    from nsj_queue_lib.db.driver import Listener
    from nsj_queue_lib.runtime.liveness import Liveness

TaskHandler = Callable[[dict[str, Any], Any], "str | None"]


class MeasuredLiveness:
    """A ``Liveness`` whose claims and completions are timed and reported."""

    def __init__(self, inner: Liveness, observer: Observer):
        self.inner = inner
        self.observer = observer

    def claim(self, conn: Any, claim_next: bool = True) -> Claim | None:
        if not claim_next:
            return self.inner.claim(conn, claim_next)
        started = time.perf_counter()
        return self._claimed(started, self.inner.claim(conn, claim_next))

    def complete_and_claim(
        self, conn: Any, task: TaskRecord, mensagem: str, claim_next: bool
    ) -> Claim | None:
        started = time.perf_counter()
        claim = self.inner.complete_and_claim(conn, task, mensagem, claim_next)
        return self._completed(started, claim)

    # The awaitable forms where the inner liveness has them (the async executor's).

    @property
    def awaitable(self) -> bool:
        return bool(getattr(self.inner, "awaitable", False))

    async def claim_async(self, conn: Any, claim_next: bool = True) -> Claim | None:
        inner: Any = self.inner
        if not claim_next:
            return None
        started = time.perf_counter()
        return self._claimed(started, await inner.claim_async(conn, claim_next))

    async def complete_and_claim_async(
        self, conn: Any, task: TaskRecord, mensagem: str, claim_next: bool
    ) -> Claim | None:
        inner: Any = self.inner
        started = time.perf_counter()
        claim = await inner.complete_and_claim_async(conn, task, mensagem, claim_next)
        return self._completed(started, claim)

    def _claimed(self, started: float, claim: Claim | None) -> Claim | None:
        self.observer.claim_round_trip(time.perf_counter() - started, claim is not None)
        if claim is not None:
            self.observer.task_claimed(claim.task)
        return claim

    def _completed(self, started: float, claim: Claim | None) -> Claim | None:
        self.observer.completion_round_trip(time.perf_counter() - started)
        if claim is not None:
            self.observer.task_claimed(claim.task)
        return claim

    def unlock_in_transaction(self, conn: Any, task: TaskRecord) -> None:
        self.inner.unlock_in_transaction(conn, task)

    def after_settled(self, task: TaskRecord, conn: Any = None) -> None:
        self.inner.after_settled(task, conn)


class Contact:
    """The dispatcher's connection as ``/readyz`` sees it (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self.connected = False
        self.last_ok: float | None = None  # clock time of the last round trip that succeeded

    def opened(self) -> None:
        with self._lock:
            self.connected = True
            self.last_ok = self._clock()

    def closed(self) -> None:
        with self._lock:
            self.connected = False

    def ok(self) -> None:
        with self._lock:
            self.last_ok = self._clock()

    def seconds_since_ok(self) -> float | None:
        with self._lock:
            return None if self.last_ok is None else self._clock() - self.last_ok


class MeasuredListener:
    """A ``Listener`` that keeps ``Contact`` up to date and reports notifications.

    The dispatcher queries the database (the next due time) right before every
    wait, and closes its listener when that or the wait fails: a wait that
    starts or returns is a round trip that succeeded. ``notifications`` is
    False where wake-ups are polls, not notifications.
    """

    def __init__(self, inner: Listener, contact: Contact, observer: Observer, notifications: bool):
        self.inner = inner
        self.contact = contact
        self.observer = observer
        self.notifications = notifications

    def open(self) -> None:
        self.inner.open()
        self.contact.opened()

    def close(self) -> None:
        self.contact.closed()
        self.inner.close()

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        self.contact.ok()
        payloads = self.inner.wait(timeout, interrupt_fd)
        self.contact.ok()
        if self.notifications and any(p not in (HALT_PAYLOAD, SCHEDULED_PAYLOAD) for p in payloads):
            self.observer.notified()
        return payloads


def timed_handler(handler: TaskHandler, observer: Observer) -> TaskHandler:
    """``handler``, its duration reported by ``processo`` whether it returns or raises (for an
    ``async def`` handler: until its coroutine ends); for a task of a process, also its
    delay and duration by kind (``process_task_ran``)."""

    def run(row: dict[str, Any], conn: Any) -> Any:
        started = time.perf_counter()
        # The lock key tells a process's task from the row the claim returned: other tasks
        # cost no query and no clock read more.
        began = _now() if process_id_of(row) is not None else None

        def report() -> None:
            seconds = time.perf_counter() - started
            processo = str(row.get("processo") or "")
            observer.handler_ran(processo, seconds)
            if began is not None:
                _process_task_ran(observer, row, processo, began, seconds)

        try:
            result = handler(row, conn)
        except BaseException:
            report()
            raise
        if inspect.iscoroutine(result):
            return _reported(result, report)
        report()
        return result

    return run


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _process_task_ran(
    observer: Observer,
    row: dict[str, Any],
    processo: str,
    began: datetime.datetime,
    seconds: float,
) -> None:
    """Report a process's task, by the kind ``process/running.py`` left on the context
    (None: the task never reached its process, e.g. a dead letter, which runs without it)."""
    try:
        kind = current_task().process_kind
    except NoCurrentTaskError:
        return
    if kind is None:
        return
    observer.process_task_ran(processo, kind, seconds_waited(row.get("data_hora"), began), seconds)


def seconds_waited(due: Any, now: datetime.datetime) -> float | None:
    """Seconds from ``due`` (a data_hora; naive ones are UTC, as worker sessions read them)
    to ``now``; never negative (clocks differ a little); None without a time."""
    if not isinstance(due, datetime.datetime):
        return None
    if due.tzinfo is None:
        due = due.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (now - due).total_seconds())


async def _reported(coroutine: Coroutine[Any, Any, Any], report: Callable[[], None]) -> Any:
    try:
        return await coroutine
    finally:
        report()
