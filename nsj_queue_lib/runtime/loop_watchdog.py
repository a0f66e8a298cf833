"""Logs an event loop that stops answering: an ``async def`` handler that blocks it.

Every ``CHECK_INTERVAL_SECONDS`` a thread schedules a no-op on the loop; when
it has not run within ``BLOCKED_AFTER_SECONDS``, some coroutine is running
without awaiting (``time.sleep``, a sync database call, heavy CPU) and every
other task of the worker is stalled. One warning names the task(s), another
says how long the loop was blocked once it answers again.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from nsj_queue_lib.log import get_logger

logger = get_logger("executor")

BLOCKED_AFTER_SECONDS = 1.0
CHECK_INTERVAL_SECONDS = 0.25


class LoopWatchdog:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        suspects: Callable[[], list[int]],
        stop: threading.Event,
        queue_name: str,
        blocked_after: float = BLOCKED_AFTER_SECONDS,
    ):
        self._loop = loop
        self._suspects = suspects
        self._stop = stop
        self._queue = queue_name
        self._blocked_after = blocked_after
        self._thread = threading.Thread(target=self._run, name="nsj-loop-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            answered = threading.Event()
            try:
                self._loop.call_soon_threadsafe(answered.set)
            except RuntimeError:  # the loop closed: the executor stopped
                return
            started = time.monotonic()
            if not answered.wait(self._blocked_after):
                self._report(answered, started)
            self._stop.wait(CHECK_INTERVAL_SECONDS)

    def _report(self, answered: threading.Event, started: float) -> None:
        tasks = ",".join(str(task_id) for task_id in self._suspects()) or "?"
        logger.warning(
            "queue=%s task=%s: an async handler has blocked the event loop for more than "
            "%.1f s; every other task of this worker waits (use await, or asyncio.to_thread "
            "for blocking calls)",
            self._queue,
            tasks,
            self._blocked_after,
        )
        while not answered.wait(CHECK_INTERVAL_SECONDS):
            if self._stop.is_set() and self._loop.is_closed():
                return
        logger.warning(
            "queue=%s task=%s: the event loop was blocked for %.1f s",
            self._queue,
            tasks,
            time.monotonic() - started,
        )
