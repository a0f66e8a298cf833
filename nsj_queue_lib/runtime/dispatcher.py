"""The dispatcher: knows when there is work and wakes the executor threads.

It waits on a dedicated LISTEN connection and wakes an executor on every
notification; at start (tasks already ready never wait for a notification),
after reconnecting, when the next scheduled row becomes due, and at least
every QUEUE_WAIT_NOTIFY_INTERVAL it also turns due 'agendada' rows into
'pendente' and wakes the executors. A database outage is logged and retried
with back-off; LISTEN is re-issued on the new connection. 'HALT' stops the worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg

from nsj_queue_lib.db.dialect import notify_channel
from nsj_queue_lib.db.queue_store import QueueStore
from nsj_queue_lib.exceptions import DatabaseError, QueueTableMissingError
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.notify.postgres_listener import HALT_PAYLOAD, SCHEDULED_PAYLOAD, PostgresListener
from nsj_queue_lib.runtime.executor import TaskExecutor
from nsj_queue_lib.runtime.waker import Waker
from nsj_queue_lib.settings import Settings

logger = get_logger("dispatcher")

BACKOFF_START_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 15.0
PROMOTE_LIMIT = 1000
# Scheduled rows are woken for a little after their time, never before it.
DUE_MARGIN_SECONDS = 0.002
AFTER_PROMOTION_PAUSE_SECONDS = 0.05


class QueueTableMissing(Exception):
    """The configured queue table does not exist: a configuration error, not an outage."""


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        store: QueueStore,
        executor: TaskExecutor,
        connect: Callable[[bool], psycopg.Connection],
        stop: threading.Event,
        on_halt: Callable[[], None],
        on_reconnect: Callable[[], None] = lambda: None,
        listener=None,
    ):
        self.settings = settings
        self.store = store
        self.executor = executor
        self._connect = connect
        self._stop = stop
        self._on_halt = on_halt
        self._on_reconnect = on_reconnect
        self._waker = Waker()
        self._listener = listener or PostgresListener(
            lambda: connect(True), notify_channel(settings.queue_name)
        )
        self._control: psycopg.Connection | None = None
        self.notifications = 0

    def interrupt(self) -> None:
        """Wake the dispatcher now (used at stop)."""
        self._waker.wake()

    def run(self) -> None:
        backoff = BACKOFF_START_SECONDS
        connected_before = False
        try:
            while not self._stop.is_set():
                try:
                    self._open()
                    if connected_before:
                        logger.info(
                            "queue=%s: reconnected to the database", self.settings.queue_name
                        )
                        self._on_reconnect()
                    connected_before = True
                    backoff = BACKOFF_START_SECONDS
                    self._loop()
                except (DatabaseError, psycopg.Error) as exc:
                    logger.warning(
                        "queue=%s: database or socket server unavailable (%s); retrying in %.1f s",
                        self.settings.queue_name,
                        str(exc).strip(),
                        backoff,
                    )
                    self._close()
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX_SECONDS)
        finally:
            self._close()
            self._waker.close()

    def _open(self) -> None:
        self._close()
        self._listener.open()
        self._control = self._connect(True)
        if self.executor.queue_oid is None:
            try:
                self.executor.queue_oid = self.store.queue_oid(self._control)
            except QueueTableMissingError as exc:
                # Not an outage: waiting would never help.
                raise QueueTableMissing(
                    f"QUEUE_TABLE: table {self.settings.queue_table} does not exist "
                    "(create it with python -m nsj_queue_lib.db_gen)"
                ) from exc

    def _close(self) -> None:
        self._listener.close()
        if self._control is not None:
            try:
                self._control.close()
            except Exception:  # noqa: BLE001 - closing a connection that may be broken
                pass
            self._control = None

    def _loop(self) -> None:
        concurrency = self.settings.queue_concurrency
        timed_out = True  # at start and after reconnecting: look at everything
        while not self._stop.is_set():
            if timed_out:
                self.store.promote_due(self._control, PROMOTE_LIMIT)
                self.executor.wake(concurrency)
            timeout = self._idle_timeout()
            if timeout <= 0 and not timed_out:
                timed_out = True  # a retry is due already: promote it now
                continue
            # Rows still due right after a promotion are being promoted by
            # another worker (skipped as locked): look again shortly.
            timeout = max(timeout, AFTER_PROMOTION_PAUSE_SECONDS)
            self._waker.drain()
            if self._stop.is_set():  # stop sets the flag before waking: nothing is missed
                return
            payloads = self._listener.wait(timeout, self._waker.fileno())
            if HALT_PAYLOAD in payloads:
                logger.info("queue=%s: HALT received; stopping", self.settings.queue_name)
                self._on_halt()
                return
            self.notifications += len(payloads)
            if any(p != SCHEDULED_PAYLOAD for p in payloads):
                self.executor.wake(1)
            # A 'scheduled' notification only moves the next wake-up, computed
            # again at the top of the loop.
            timed_out = not payloads

    def _idle_timeout(self) -> float:
        """Seconds until the next scheduled row is due, capped by QUEUE_WAIT_NOTIFY_INTERVAL."""
        timeout = self.settings.queue_wait_notify_interval
        seconds = self.store.seconds_until_next_due(self._control)
        if seconds is not None:
            timeout = min(timeout, seconds + DUE_MARGIN_SECONDS)
        return timeout
