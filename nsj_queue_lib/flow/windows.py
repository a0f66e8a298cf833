"""time_windows: when a processo's tasks may start, as days and hours in a time zone.

One window is ``"[days] HH:MM-HH:MM [Zone/Name]"`` (``HH:MM:SS`` too): ``days`` a comma list of
days or day ranges (``mon-fri``, ``sat,sun``; every day when left out), the
hours in the zone's local time (``24:00`` ends at midnight; an end before the
start crosses midnight, and the window belongs to the day it starts on), the
zone an IANA name (``UTC`` when left out). Pure arithmetic: the claim asks
``is_open`` and ``seconds_until_open``.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import zoneinfo
from collections.abc import Sequence

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MAX_WINDOW_TEXT = 200
MAX_WINDOWS = 20
_HOURS = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?-(\d{1,2}):(\d{2})(?::(\d{2}))?$")


@dataclasses.dataclass(frozen=True)
class TimeWindow:
    days: frozenset[int]  # 0 = Monday
    start: datetime.time
    end: datetime.time | None  # None: midnight at the end of the day
    zone: str

    def _bounds(self, day: datetime.date) -> tuple[datetime.datetime, datetime.datetime]:
        tz = zoneinfo.ZoneInfo(self.zone)
        start = datetime.datetime.combine(day, self.start, tzinfo=tz)
        if self.end is None or self.end <= self.start:
            end_day = day + datetime.timedelta(days=1)
            end_time = self.end or datetime.time(0, 0)
        else:
            end_day, end_time = day, self.end
        end = datetime.datetime.combine(end_day, end_time, tzinfo=tz)
        return start.astimezone(datetime.timezone.utc), end.astimezone(datetime.timezone.utc)

    def spans(self, now: datetime.datetime) -> list[tuple[datetime.datetime, datetime.datetime]]:
        """The window's occurrences from the day before ``now`` to a week after it (UTC)."""
        today = now.astimezone(zoneinfo.ZoneInfo(self.zone)).date()
        found = []
        for offset in range(-1, 9):
            day = today + datetime.timedelta(days=offset)
            if day.weekday() in self.days:
                found.append(self._bounds(day))
        return found


def _day(name: str, text: str) -> int:
    try:
        return DAYS.index(name)
    except ValueError:
        raise ValueError(f"unknown day {name!r} in {text!r} (use {', '.join(DAYS)})") from None


def _days(part: str, text: str) -> frozenset[int]:
    days: set[int] = set()
    for item in part.split(","):
        first, _, last = item.partition("-")
        start = _day(first, text)
        stop = _day(last, text) if last else start
        # A range may wrap around the week (fri-mon).
        span = (stop - start) % 7
        days.update((start + i) % 7 for i in range(span + 1))
    return frozenset(days)


def _clock(
    hours: str, minutes: str, secs: str | None, text: str, allow_24: bool
) -> datetime.time | None:
    h, m, sec = int(hours), int(minutes), int(secs or 0)
    if allow_24 and (h, m, sec) == (24, 0, 0):
        return None
    if h > 23 or m > 59 or sec > 59:
        raise ValueError(f"bad time {hours}:{minutes} in {text!r}")
    return datetime.time(h, m, sec)


def parse_window(text: str) -> TimeWindow:
    """One window; ``ValueError`` saying what is wrong with ``text``."""
    if not isinstance(text, str):
        raise ValueError(f"a time window is a string, got {text!r}")
    if len(text) > MAX_WINDOW_TEXT:
        raise ValueError(f"a time window must be at most {MAX_WINDOW_TEXT} characters")
    words = text.lower().split() if text else []
    original = text.split()
    days = frozenset(range(7))
    zone = "UTC"
    if words and not _HOURS.match(words[0]):
        days = _days(words.pop(0), text)
        original.pop(0)
    if not words or not _HOURS.match(words[0]):
        raise ValueError(f'expected "[days] HH:MM-HH:MM [zone]", got {text!r}')
    hours = _HOURS.match(words.pop(0))
    original.pop(0)
    assert hours is not None
    if original:
        zone = original.pop(0)
    if original:
        raise ValueError(f"unexpected {' '.join(original)!r} in {text!r}")
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {zone!r} in {text!r}") from None
    start = _clock(hours.group(1), hours.group(2), hours.group(3), text, allow_24=False)
    end = _clock(hours.group(4), hours.group(5), hours.group(6), text, allow_24=True)
    assert start is not None
    if end == start:
        raise ValueError(f"empty window (start equals end) in {text!r}")
    return TimeWindow(days, start, end, zone)


def parse_windows(value: str | Sequence[str]) -> tuple[TimeWindow, ...]:
    """``time_windows=``: one window or a list of them (a task may start in any)."""
    texts = [value] if isinstance(value, str) else list(value)
    if not texts:
        raise ValueError("needs at least one window")
    if len(texts) > MAX_WINDOWS:
        raise ValueError(f"at most {MAX_WINDOWS} windows")
    return tuple(parse_window(text) for text in texts)


def is_open(windows: Sequence[TimeWindow], now: datetime.datetime) -> bool:
    return any(start <= now < end for w in windows for start, end in w.spans(now))


def seconds_until_open(windows: Sequence[TimeWindow], now: datetime.datetime) -> float:
    """0 when a window is open at ``now``; else the seconds until the next one opens."""
    best: float | None = None
    for window in windows:
        for start, end in window.spans(now):
            if start <= now < end:
                return 0.0
            if start > now:
                wait = (start - now).total_seconds()
                best = wait if best is None else min(best, wait)
    # Every window recurs within a week, so one always opens within the spans.
    return best if best is not None else 7 * 86400.0
