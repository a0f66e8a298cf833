"""The limiter keeps its lead (runtime/limited.py): a worker whose claim started the last
start it knows of calls EARLY_SECONDS ahead of the next, even when a call made before that
moment (a wake-up's look; on MariaDB the polling listener's, every interval) finds nothing
yet. Made a follower by it, nobody would call before FOLLOWER_DELAY_SECONDS later, and the
start would be that late (bench_limits: 3 in ~100 interval_s gaps on MariaDB)."""

from __future__ import annotations

import threading

import pytest

from nsj_queue_lib.db.limits_store import LimitedClaim
from nsj_queue_lib.flow.limits import EARLY_SECONDS, ProcessoLimits
from nsj_queue_lib.model import QUEUE_COLUMNS, TaskRecord
from nsj_queue_lib.runtime import limited
from nsj_queue_lib.runtime.limited import FOLLOWER_DELAY_SECONDS, Limiter

TASK = TaskRecord.from_row({**dict.fromkeys(QUEUE_COLUMNS), "id": 1, "processo": "p"})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(limited.time, "monotonic", fake)
    return fake


def limiter() -> Limiter:
    declared = {"p": ProcessoLimits("p", interval_min_s=0.3, interval_max_s=0.3)}
    return Limiter("q", None, declared, {"p"}, threading.Event())  # type: ignore[arg-type]


def test_a_look_before_the_lead_moment_that_finds_nothing_keeps_the_lead(clock):
    lim = limiter()
    lim.claimed(LimitedClaim(TASK, wait=0.3), lim.generation(), started=clock.now - 0.05)
    assert lim.seconds_until_due() == pytest.approx(0.3 - EARLY_SECONDS)
    # 10 ms before the lead moment a wake-up's look: the start (60 ms away) is not
    # within its EARLY_SECONDS yet, so nothing.
    clock.now += 0.3 - EARLY_SECONDS - 0.01
    lim.mark_due()
    generation, started = lim.generation(), clock.now
    clock.now += 0.001
    lim.claimed(LimitedClaim(None, wait=0.059), generation, started=started)
    # Still the lead moment (9 ms from now), not a follower's (9 + 15 ms).
    assert lim.seconds_until_due() == pytest.approx(0.009)


def test_nothing_at_or_after_the_lead_moment_makes_a_follower(clock):
    lim = limiter()
    lim.claimed(LimitedClaim(TASK, wait=0.3), lim.generation(), started=clock.now - 0.05)
    clock.now += 0.3 - EARLY_SECONDS
    # The lead call itself, and another worker started the task first: a follower now.
    started = clock.now
    clock.now += 0.002
    lim.claimed(LimitedClaim(None, wait=0.3), lim.generation(), started=started)
    follower = 0.3 - EARLY_SECONDS + FOLLOWER_DELAY_SECONDS
    assert lim.seconds_until_due() == pytest.approx(follower)
    # A follower it stays when a later look finds nothing.
    clock.now += 0.1
    lim.claimed(LimitedClaim(None, wait=0.2), lim.generation(), started=clock.now)
    assert lim.seconds_until_due() == pytest.approx(0.2 - EARLY_SECONDS + FOLLOWER_DELAY_SECONDS)
