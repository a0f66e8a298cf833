"""An executor thread's loop around group drains (runtime/executor.py, issue 19): it drains
only when woken, and after a drain that stepped back it claims again by itself once
QUEUE_BATCH_MAX_MS passed without a wake-up, unless a claim since saw what it freed."""

from __future__ import annotations

import threading
import time

from nsj_queue_lib.runtime.executor import TaskExecutor
from nsj_queue_lib.settings import Settings

MAX_MS = 50.0


class Groups:
    """A group drain whose drains step back (or not) as told, counting them."""

    def __init__(self, steps_back: bool, claimed_since: bool):
        self.steps_back = steps_back
        self.claimed = claimed_since
        self.drains = 0
        self.drained = threading.Event()

    def drain(self) -> int | None:
        self.drains += 1
        self.drained.set()
        return 7 if self.steps_back else None

    def claimed_since(self, mark: int) -> bool:
        assert mark == 7
        return self.claimed


def executor_with(groups: Groups) -> tuple[TaskExecutor, threading.Event]:
    settings = Settings(
        db_host="h",
        db_name="d",
        db_user="u",
        queue_name="q",
        queue_table="q",
        queue_concurrency=1,
        queue_batch_max_ms=MAX_MS,
    )
    stop = threading.Event()
    executor = TaskExecutor(settings, None, None, None, stop, None, None)  # type: ignore[arg-type]
    executor.group = groups
    return executor, stop


def drains_after(groups: Groups, seconds: float) -> int:
    executor, stop = executor_with(groups)
    executor.start()
    try:
        assert not groups.drained.wait(3 * MAX_MS / 1000)  # nothing before a wake-up
        executor.wake(1)
        assert groups.drained.wait(5)
        time.sleep(seconds)
        return groups.drains
    finally:
        stop.set()
        executor.interrupt()
        executor.join(5)


def test_a_thread_drains_only_when_woken_and_once_per_wake_up():
    assert drains_after(Groups(steps_back=False, claimed_since=False), 6 * MAX_MS / 1000) == 1


def test_after_stepping_back_unseen_it_claims_again_by_itself():
    assert drains_after(Groups(steps_back=True, claimed_since=False), 6 * MAX_MS / 1000) >= 3


def test_after_stepping_back_seen_by_a_claim_it_stays_idle():
    assert drains_after(Groups(steps_back=True, claimed_since=True), 6 * MAX_MS / 1000) == 1
