"""A slot's loop around group drains (runtime/slots.py, runtime/drain_group.py, issue 19): it
drains only when woken, and after a drain that stepped back it claims again by itself once
QUEUE_BATCH_MAX_MS passed without a wake-up, unless a claim since saw what it freed."""

from __future__ import annotations

import threading
import time
import types

from nsj_queue_lib.runtime.drain_group import GroupDrain
from nsj_queue_lib.runtime.running import RunningTasks
from nsj_queue_lib.runtime.slots import ThreadSlots
from nsj_queue_lib.runtime.tokens import WakeTokens

MAX_MS = 50.0


class Groups:
    """Group drains that step back (or not) as told, counting them."""

    def __init__(self, steps_back: bool, claimed_since: bool):
        self.steps_back = steps_back
        self.claimed = claimed_since
        self.drains = 0
        self.drained = threading.Event()

    def drain_groups(self) -> int | None:
        self.drains += 1
        self.drained.set()
        return 7 if self.steps_back else None

    def claimed_since(self, mark: int) -> bool:
        assert mark == 7
        return self.claimed


def group_drain_without_a_database(
    running: RunningTasks, tokens: WakeTokens, stop: threading.Event, max_ms: float = MAX_MS
) -> GroupDrain:
    """A group drain whose database parts are missing: its loop and its state only."""
    attempts = types.SimpleNamespace(
        connections=None, running=running, session=None, liveness=None, queue_name="q"
    )
    return GroupDrain(
        attempts,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        tokens,
        stop,
        size=20,
        max_ms=max_ms,
    )


def slot_with(groups: Groups) -> tuple[ThreadSlots, threading.Event]:
    stop = threading.Event()
    tokens = WakeTokens(1, stop)
    running = RunningTasks()
    drain = group_drain_without_a_database(running, tokens, stop)
    drain.drain_groups = groups.drain_groups  # type: ignore[method-assign]
    drain.steps.claimed_since = groups.claimed_since  # type: ignore[method-assign]
    return ThreadSlots("q", 1, drain, tokens, running, stop), stop


def drains_after(groups: Groups, seconds: float) -> int:
    slots, stop = slot_with(groups)
    slots.start()
    try:
        assert not groups.drained.wait(3 * MAX_MS / 1000)  # nothing before a wake-up
        slots.wake(1)
        assert groups.drained.wait(5)
        time.sleep(seconds)
        return groups.drains
    finally:
        stop.set()
        slots.interrupt()
        slots.join(5)


def test_a_thread_drains_only_when_woken_and_once_per_wake_up():
    assert drains_after(Groups(steps_back=False, claimed_since=False), 6 * MAX_MS / 1000) == 1


def test_after_stepping_back_unseen_it_claims_again_by_itself():
    assert drains_after(Groups(steps_back=True, claimed_since=False), 6 * MAX_MS / 1000) >= 3


def test_after_stepping_back_seen_by_a_claim_it_stays_idle():
    assert drains_after(Groups(steps_back=True, claimed_since=True), 6 * MAX_MS / 1000) == 1


def test_a_given_up_groups_tasks_back_in_the_queue_wake_a_slot():
    """The replacement slot was woken when the task was abandoned, before the group's other
    tasks went back; idle since, it must be woken again or they wait for a notification that
    never comes (seen as three tasks left 'pendente' for 45 s beside the whole suite)."""
    from nsj_queue_lib.model import Claim, TaskRecord
    from nsj_queue_lib.runtime.commit_group import CommitGroup
    from nsj_queue_lib.runtime.running import RunningTask

    stop = threading.Event()
    tokens = WakeTokens(1, stop)
    drain = group_drain_without_a_database(RunningTasks(), tokens, stop)
    given_back = []
    drain.recovery = types.SimpleNamespace(  # type: ignore[assignment]
        give_back=lambda tasks, failures, conn, committed: given_back.extend(tasks)
    )
    hung = TaskRecord(id=1, tentativa=1, dead=False, payload=None, row={})
    waiting = TaskRecord(id=2, tentativa=1, dead=False, payload=None, row={})
    item = RunningTask(hung, conn=None)
    drain._groups[item.thread_id or 0] = CommitGroup([Claim(waiting, True)])

    assert tokens.take(timeout=0) is None  # no token before
    drain.given_up(item)
    assert [task.id for task, _ in given_back] == [2]
    assert tokens.take(timeout=0) is True
    drain.given_up(item)  # a second call (the slot's and the timeout thread's) gives nothing
    assert given_back == [(waiting, None)]
