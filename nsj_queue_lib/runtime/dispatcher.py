"""The dispatcher: knows when there is work and wakes the executor threads.

It waits on the driver's listener (LISTEN, polling or the socket server) and
wakes an executor on every wake-up; at start (tasks already ready never wait
for a notification), after reconnecting, when the next scheduled row becomes
due, and at least every QUEUE_WAIT_NOTIFY_INTERVAL it also turns due
'agendada' rows into 'pendente' and wakes the executors; where a claim may say
"nothing" for a moment without looking (the store's claim_recheck_seconds), also that
long after the last notification. The next scheduled row's time is asked of the
database at start, when that time comes, after a 'scheduled' notification and, where
the database notifies (it then says 'scheduled' for rows due later), after the other
notifications at most every REPLAN_SECONDS: a task ready now changes no scheduled
time, and a query after each one competed with the claim of the executor it had just
woken. Polling wake-ups (MySQL) re-plan every time. A database outage is logged and
retried with back-off; the listener is opened again on the new connection. 'HALT'
stops the worker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from nsj_queue_lib.cancel_notice import cancelled_ids
from nsj_queue_lib.db.driver import Listener, close_quietly
from nsj_queue_lib.db.queue_store import MaintenanceStore
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.notify import HALT_PAYLOAD, SCHEDULED_PAYLOAD
from nsj_queue_lib.runtime.waker import Waker
from nsj_queue_lib.settings import Settings

logger = get_logger("dispatcher")

BACKOFF_START_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 15.0
PROMOTE_LIMIT = 1000
# Scheduled rows are woken for a little after their time, never before it.
DUE_MARGIN_SECONDS = 0.002
AFTER_PROMOTION_PAUSE_SECONDS = 0.05
# After notifications of tasks ready now, how long the next scheduled row's time (and
# that of a timed pause's end, which nothing notifies) is taken from the last query.
REPLAN_SECONDS = 1.0


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        store: MaintenanceStore,
        wake: Callable[[int], None],
        connect: Callable[[], Any],
        listener: Listener,
        is_outage: Callable[[BaseException], bool],
        stop: threading.Event,
        on_halt: Callable[[], None],
        on_reconnect: Callable[[], None] = lambda: None,
        on_cancel: Callable[[list[int]], None] = lambda task_ids: None,
        on_wake: Callable[[], None] = lambda: None,
        notifies: bool = False,
    ):
        self.settings = settings
        self.store = store
        self._wake = wake  # the executor's: let up to n slots claim
        self._connect = connect
        self._listener = listener
        self._is_outage = is_outage
        self._stop = stop
        self._on_halt = on_halt
        self._on_reconnect = on_reconnect
        self._on_cancel = on_cancel  # "cancel:<id>" notifications (runtime/cancel_watch.py)
        # Before executors are woken: a held-back limited task may start now (runtime/limited.py).
        self._on_wake = on_wake
        self._waker = Waker()
        self._control: Any = None
        self.notifications = 0
        # When to wake the executors once more after notifications (claim_recheck_seconds).
        self._recheck_at: float | None = None
        # The last plan: when it was asked, and the time it gives (time.monotonic()).
        self._planned_at: float | None = None
        self._planned_until = 0.0
        # Where the database notifies, it says 'scheduled' for a row due later.
        self._replan_seconds = REPLAN_SECONDS if notifies else 0.0

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
                except Exception as exc:
                    if not self._is_outage(exc):
                        raise
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
        self._control = self._connect()

    def _close(self) -> None:
        self._listener.close()
        close_quietly(self._control)
        self._control = None

    def _loop(self) -> None:
        concurrency = self.settings.queue_concurrency
        timed_out = True  # at start and after reconnecting: look at everything
        replan = True
        while not self._stop.is_set():
            if timed_out:
                self._recheck_at = None
                self.store.promote_due(self._control, PROMOTE_LIMIT)
                self._on_wake()
                self._wake(concurrency)
            timeout = self._idle_timeout(replan or timed_out)
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
            cancelled, wake_ups = cancelled_ids(payloads)
            if cancelled:
                self._on_cancel(cancelled)
            if HALT_PAYLOAD in wake_ups:
                logger.info("queue=%s: HALT received; stopping", self.settings.queue_name)
                self._on_halt()
                return
            self.notifications += len(payloads)
            if any(p != SCHEDULED_PAYLOAD for p in wake_ups):
                self._on_wake()
                self._wake(1)
                recheck = self.store.claim_recheck_seconds
                if recheck is not None:
                    self._recheck_at = time.monotonic() + recheck
            # A 'scheduled' notification only moves the next wake-up, computed
            # again at the top of the loop.
            timed_out = not payloads
            replan = SCHEDULED_PAYLOAD in wake_ups

    def _idle_timeout(self, replan: bool) -> float:
        """Seconds until the next scheduled row is due, capped by QUEUE_WAIT_NOTIFY_INTERVAL;
        asked of the database when ``replan`` says, or the last plan is ``replan_seconds``
        old (0: always) or has come."""
        now = time.monotonic()
        if (
            replan
            or self._planned_at is None
            or now - self._planned_at >= self._replan_seconds
            or self._planned_until <= now
        ):
            timeout = self.settings.queue_wait_notify_interval
            seconds = self.store.seconds_until_next_due(self._control)
            if seconds is not None:
                timeout = min(timeout, seconds + DUE_MARGIN_SECONDS)
            self._planned_at, self._planned_until = now, now + timeout
        else:
            timeout = self._planned_until - now
        if self._recheck_at is not None:
            timeout = min(timeout, max(0.0, self._recheck_at - now))
        return timeout
