"""The step-back of group commit (runtime/group_commit.py, issue 19): pure decisions."""

from __future__ import annotations

import threading
import types

from nsj_queue_lib.runtime.group_commit import WAKE_BACKOFF_STEPS, GroupDrain, _Group


def a_drain(batch_size: int = 20, max_ms: float = 20.0) -> GroupDrain:
    executor = types.SimpleNamespace(
        settings=types.SimpleNamespace(batch_size=batch_size, queue_batch_max_ms=max_ms),
        liveness=object(),
    )
    return GroupDrain(executor, ops=None)  # type: ignore[arg-type]


def short_group() -> _Group:
    return _Group([object()], asked=20)  # type: ignore[list-item]


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
        drain._count_active(True)
        entered.wait()  # both draining before either decides
        results.append(drain._steps_back(short_group()))
        decided.wait()

    threads = [threading.Thread(target=executor_thread) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False, True]
    assert drain._active == 1


def test_the_last_executor_draining_never_steps_back():
    drain = a_drain()
    drain._count_active(True)
    assert not drain._steps_back(short_group())
    assert drain._active == 1


def test_a_full_claim_never_steps_back():
    drain = a_drain()
    drain._count_active(True)
    in_thread(lambda: drain._count_active(True))  # another executor draining
    full = _Group([object()] * 20, asked=20)  # type: ignore[list-item]
    assert not drain._steps_back(full)
    limited = _Group([object()], asked=1)  # type: ignore[list-item]
    assert not drain._steps_back(limited)


def test_wasted_wake_ups_hold_the_next_ones_back_until_one_finds_work():
    drain = a_drain(max_ms=1000.0)
    assert drain._may_wake()
    drain._woken(found=False)  # woken by the dispatcher: no full claim's wake-up
    assert drain._may_wake()
    for _ in range(WAKE_BACKOFF_STEPS + 2):
        drain._woke(True)
        drain._woken(found=False)
        assert not drain._may_wake()
    assert drain._wasted_wakes == WAKE_BACKOFF_STEPS
    drain._woke(True)
    drain._woken(found=True)
    assert drain._may_wake()


def test_claimed_since_counts_claims_started_after_the_mark():
    drain = a_drain()
    mark = drain._claims_started
    assert not drain.claimed_since(mark)
    drain._claim_started()
    assert drain.claimed_since(mark)
