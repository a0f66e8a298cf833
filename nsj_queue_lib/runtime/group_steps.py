"""When a group drain steps back, and when a full claim wakes another executor.

With lock keys scarce (issue 19), each draining executor holds its group's
keys until the group commits: with 100 keys and 8 executors, groups of ~12
tasks, one commit and one claim (walking the backlog) per 12 tasks, whatever
QUEUE_BATCH_SIZE is. An executor whose claim got fewer tasks than it asked
for leaves the work to the others, whose groups grow with the keys it frees
(``steps_back``); a full claim wakes an idle executor again when there is more
work than they hold. Where keys are scarce, the executors draining hold them
all and their claims still come back full: each would wake an idle executor
whose claim walks the backlog for nothing, so such wasted wake-ups hold the
next ones back, longer each time in a row (``woken``).
"""

from __future__ import annotations

import threading
import time

# A full claim wakes no idle executor for QUEUE_BATCH_MAX_MS x 2**n after n wake-ups in a
# row found nothing to claim, n up to this.
WAKE_BACKOFF_STEPS = 3


class DrainSteps:
    def __init__(self, max_seconds: float):
        self.max_seconds = max_seconds
        self._lock = threading.Lock()
        self._mine = threading.local()  # per executor thread: whether it counts as active
        # Executor threads draining that have not stepped back, and claims started so far
        # (a stepped-back thread knows from it whether a claim saw what its commit freed).
        self.active = 0
        self.claims_started = 0
        self.wasted_wakes = 0
        self._wake_backoff_until = 0.0
        self._claim_wakes = 0  # threads woken by a full claim, their drain not started

    def count_active(self, active: bool) -> None:
        """This thread in or out of ``active`` (once either way)."""
        with self._lock:
            if active != getattr(self._mine, "active", False):
                self.active += 1 if active else -1
                self._mine.active = active

    def steps_back(self, short: bool) -> bool:
        """Whether this thread commits its group (``short``: its claim got fewer tasks than
        it asked for) without claiming the next and goes idle. Under the lock, so that two
        executors never both step back counting on each other: the last one draining
        never does."""
        if not short:
            return False
        with self._lock:
            if self.active <= 1:
                return False
            self.active -= 1
            self._mine.active = False
        return True

    def claim_started(self) -> None:
        with self._lock:
            self.claims_started += 1

    def mark(self) -> int:
        """The count of claims started, for ``claimed_since``."""
        with self._lock:
            return self.claims_started

    def claimed_since(self, mark: int) -> bool:
        """Whether a claim started after ``mark``."""
        with self._lock:
            return self.claims_started > mark

    def woken(self, found: bool) -> None:
        """A drain's first claim found tasks or not."""
        with self._lock:
            if self._claim_wakes == 0:
                return  # woken by the dispatcher, or after a step-back: not by a full claim
            self._claim_wakes -= 1
            if found:
                self.wasted_wakes = 0
                self._wake_backoff_until = 0.0
                return
            self.wasted_wakes = min(WAKE_BACKOFF_STEPS, self.wasted_wakes + 1)
            backoff = self.max_seconds * (1 << self.wasted_wakes)
            self._wake_backoff_until = time.monotonic() + backoff

    def woke(self, woken: bool) -> None:
        if woken:
            with self._lock:
                self._claim_wakes += 1

    def may_wake(self) -> bool:
        with self._lock:
            return time.monotonic() >= self._wake_backoff_until
