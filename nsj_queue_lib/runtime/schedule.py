"""When a periodic service runs next: minutes of the hour, or a fixed interval.

Minute lists align every worker of a cluster on the same wall-clock minutes
("0,5,10"), so they race for the service's lock at the same moment and one
of them does the work; an interval in seconds is for tests and busy queues.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence


class MinuteSchedule:
    def __init__(self, minutes: Sequence[int]):
        if not minutes or any(not 0 <= m <= 59 for m in minutes):
            raise ValueError(f"minutes must be a non-empty list of 0-59, got {list(minutes)!r}")
        self.minutes = tuple(sorted(set(minutes)))

    def next_after(self, now: datetime.datetime) -> datetime.datetime:
        """The next start of a listed minute strictly after ``now``."""
        start = now.replace(second=0, microsecond=0)
        for step in range(1, 61):
            candidate = start + datetime.timedelta(minutes=step)
            if candidate.minute in self.minutes:
                return candidate
        raise AssertionError("unreachable: every hour holds a listed minute")

    def __repr__(self) -> str:
        return f"MinuteSchedule({','.join(map(str, self.minutes))})"


class IntervalSchedule:
    def __init__(self, seconds: float):
        if seconds <= 0:
            raise ValueError(f"interval must be > 0 seconds, got {seconds}")
        self.seconds = seconds

    def next_after(self, now: datetime.datetime) -> datetime.datetime:
        return now + datetime.timedelta(seconds=self.seconds)

    def __repr__(self) -> str:
        return f"IntervalSchedule({self.seconds:g}s)"


Schedule = MinuteSchedule | IntervalSchedule


def make_schedule(minutes: Sequence[int], interval_seconds: float | None) -> Schedule:
    """The interval when one is configured, else the minute list."""
    if interval_seconds is not None:
        return IntervalSchedule(interval_seconds)
    return MinuteSchedule(minutes)
