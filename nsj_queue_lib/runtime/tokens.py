"""Wake-up tokens: how the dispatcher, the limiter and the drains tell idle slots to claim.

A token lets one idle slot (an executor thread) try to claim; tokens given
while every slot is busy wait for the next one to go idle, up to one per slot.
A drain that claimed a task wakes one more idle slot when none is pending
(``wake_one_idle``), so a burst drains without further notifications.
"""

from __future__ import annotations

import threading
import time


class WakeTokens:
    def __init__(self, slots: int, stop: threading.Event):
        self._slots = slots
        self._stop = stop
        # Reentrant: a SIGTERM handler (WorkerRuntime.stop -> interrupt) runs in the main
        # thread between any two bytecodes, also while the supervisor holds this lock there.
        self.cond = threading.Condition(threading.RLock())
        self._tokens = 0
        self.idle = 0  # slots waiting for a token

    def wake(self, count: int = 1) -> None:
        """Let up to ``count`` slots try to claim (a token waits for a busy slot)."""
        with self.cond:
            self._tokens = min(self._slots, self._tokens + count)
            self.cond.notify(count)

    def interrupt(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def wake_one_idle(self) -> bool:
        """Wake one idle slot, if one is idle and no token is left; whether it did."""
        with self.cond:
            if self.idle and self._tokens == 0:
                self._tokens = 1
                self.cond.notify(1)
                return True
            return False

    def take(self, timeout: float | None = None) -> bool | None:
        """Wait, idle, for a token: True once taken, False when the worker stops, None
        when ``timeout`` seconds passed without one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            self.idle += 1
            try:
                while self._tokens == 0 and not self._stop.is_set():
                    if deadline is None:
                        self.cond.wait()
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    self.cond.wait(remaining)
            finally:
                self.idle -= 1
            if self._stop.is_set():
                return False
            self._tokens -= 1
            return True
