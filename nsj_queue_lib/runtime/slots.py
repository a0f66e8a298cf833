"""The executor's threads: QUEUE_CONCURRENCY slots, each draining when woken.

A slot waits idle for a wake-up token (``tokens.py``), then runs its drain
(one commit per task, or commit groups) until no task is ready. A slot whose
handler was given up after its timeout is replaced by a new thread and ends
once that handler returns (it counts as stuck meanwhile).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from nsj_queue_lib.log import get_logger
from nsj_queue_lib.runtime.running import RunningTask, RunningTasks
from nsj_queue_lib.runtime.tokens import WakeTokens

logger = get_logger("executor")


class Drain(Protocol):
    def drain(self) -> bool:
        """Claim and run tasks until none is ready; whether to drain again at once."""
        ...


class ThreadSlots:
    def __init__(
        self,
        queue_name: str,
        count: int,
        drain: Drain,
        tokens: WakeTokens,
        running: RunningTasks,
        stop: threading.Event,
    ):
        self.queue_name = queue_name
        self.drain = drain
        self.tokens = tokens
        self.running = running
        self.stop = stop
        self._made = 0  # threads made so far, replacements included (their names)
        self._threads = [self._thread() for _ in range(count)]

    def _thread(self) -> threading.Thread:
        name = f"nsj-executor-{self._made}"
        self._made += 1
        return threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def wake(self, count: int = 1) -> None:
        self.tokens.wake(count)

    def interrupt(self) -> None:
        self.tokens.interrupt()

    def given_up(self, item: RunningTask) -> None:
        """Its thread was replaced when it was abandoned: nothing more to do here."""

    def _main(self) -> None:
        woken = False
        while not self.running.is_stuck(threading.current_thread()) and (
            woken or self.tokens.take()
        ):
            try:
                woken = self.drain.drain()
            except BaseException:  # an executor thread must never die silently
                woken = False
                logger.exception(
                    "queue=%s: unexpected error in an executor thread", self.queue_name
                )
                self.stop.wait(1.0)

    def leave_behind(self, item: RunningTask) -> list[threading.Thread]:
        """Under the running tasks' lock: a new thread takes the place of the abandoned
        task's thread, which is returned (stuck until its handler returns)."""
        current = [t for t in self._threads if t.ident == item.thread_id]
        replacement = self._thread()
        self._threads = [t for t in self._threads if t not in current] + [replacement]
        replacement.start()
        return current

    def busy(self) -> int:
        """Slots claiming or running tasks (not waiting for a wake-up)."""
        with self.tokens.cond:
            return sum(1 for t in self._threads if t.is_alive()) - self.tokens.idle

    def dead_threads(self) -> list[threading.Thread]:
        """Threads that ended while the worker was not stopping."""
        if self.stop.is_set():
            return []
        return [thread for thread in self._threads if thread.ident and not thread.is_alive()]

    def threads(self) -> list[threading.Thread]:
        return list(self._threads)

    def join(self, timeout: float) -> None:
        """Wait for the threads that started (none did when the worker was refused at start)."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
