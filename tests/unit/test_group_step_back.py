"""The step-back of group commit (runtime/group_steps.py, issue 19): pure decisions."""

from __future__ import annotations

import threading

from nsj_queue_lib.runtime.commit_group import CommitGroup
from nsj_queue_lib.runtime.group_steps import WAKE_BACKOFF_STEPS, DrainSteps


def a_drain(max_ms: float = 20.0) -> DrainSteps:
    return DrainSteps(max_ms / 1000.0)


def short_group() -> bool:
    return CommitGroup([object()], asked=20).short  # type: ignore[list-item]


def in_thread(call):
    result = []
    thread = threading.Thread(target=lambda: result.append(call()))
    thread.start()
    thread.join()
    return result[0]


def test_of_two_executors_short_at_once_only_one_steps_back():
    drain = a_drain()
    entered = threading.Barrier(2)
    decided = threading.Barrier(2)
    results = []

    def executor_thread():
        drain.count_active(True)
        entered.wait()  # both draining before either decides
        results.append(drain.steps_back(short_group()))
        decided.wait()

    threads = [threading.Thread(target=executor_thread) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False, True]
    assert drain.active == 1


def test_the_last_executor_draining_never_steps_back():
    drain = a_drain()
    drain.count_active(True)
    assert not drain.steps_back(short_group())
    assert drain.active == 1


def test_a_full_claim_never_steps_back():
    drain = a_drain()
    drain.count_active(True)
    in_thread(lambda: drain.count_active(True))  # another executor draining
    full = CommitGroup([object()] * 20, asked=20)  # type: ignore[list-item]
    assert not drain.steps_back(full.short)
    limited = CommitGroup([object()], asked=1)  # type: ignore[list-item]
    assert not drain.steps_back(limited.short)


def test_wasted_wake_ups_hold_the_next_ones_back_until_one_finds_work():
    drain = a_drain(max_ms=1000.0)
    assert drain.may_wake()
    drain.woken(found=False)  # woken by the dispatcher: no full claim's wake-up
    assert drain.may_wake()
    for _ in range(WAKE_BACKOFF_STEPS + 2):
        drain.woke(True)
        drain.woken(found=False)
        assert not drain.may_wake()
    assert drain.wasted_wakes == WAKE_BACKOFF_STEPS
    drain.woke(True)
    drain.woken(found=True)
    assert drain.may_wake()


def test_claimed_since_counts_claims_started_after_the_mark():
    drain = a_drain()
    mark = drain.claims_started
    assert not drain.claimed_since(mark)
    drain.claim_started()
    assert drain.claimed_since(mark)
