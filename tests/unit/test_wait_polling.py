"""wait_for_task's polling pace (workflow/waiting.py): fast while a task may just be short,
a few looks a second once the wait has lasted."""

from __future__ import annotations

import pytest

from nsj_queue_lib.workflow import waiting


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _row(status: str) -> dict:
    return {"status": status, "reenfileirado": False, "id_inicial": 1}


def test_a_short_wait_looks_every_few_milliseconds_and_a_long_one_ten_times_a_second():
    clock = FakeClock()
    ends_at = 10.0

    def look() -> dict:
        return _row("sucesso" if clock.now >= ends_at else "processando")

    row = waiting.wait_for(look, 1, 30.0, sleep=clock.sleep, clock=clock)
    assert row["status"] == "sucesso"
    first_second = [s for s, t in zip(clock.sleeps, _times(clock.sleeps), strict=True) if t < 1.0]
    assert max(first_second) <= waiting.MAX_INTERVAL
    assert max(clock.sleeps) == pytest.approx(waiting.LONG_INTERVAL)
    # About 200 looks in the first second, then ten a second: not 2,000 for 10 s.
    assert len(clock.sleeps) < 400
    assert clock.now - ends_at <= waiting.LONG_INTERVAL + 1e-9  # seen within one look


def test_the_timeout_still_ends_the_wait_on_time():
    clock = FakeClock()
    with pytest.raises(TimeoutError):
        waiting.wait_for(lambda: _row("pendente"), 1, 2.5, sleep=clock.sleep, clock=clock)
    assert clock.now == pytest.approx(2.5)


def _times(sleeps: list[float]) -> list[float]:
    """When each sleep started."""
    started, now = [], 0.0
    for seconds in sleeps:
        started.append(now)
        now += seconds
    return started
