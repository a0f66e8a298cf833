"""When the maintenance services run: minutes of the hour, or an interval in seconds."""

from __future__ import annotations

import datetime

import pytest

from nsj_queue_lib.runtime.schedule import IntervalSchedule, MinuteSchedule, make_schedule

dt = datetime.datetime


@pytest.mark.parametrize(
    "minutes, now, expected",
    [
        ([0, 5, 10], dt(2026, 3, 1, 10, 3, 12), dt(2026, 3, 1, 10, 5)),
        ([0, 5, 10], dt(2026, 3, 1, 10, 5, 0), dt(2026, 3, 1, 10, 10)),  # strictly after now
        ([0, 5, 10], dt(2026, 3, 1, 10, 4, 59, 999999), dt(2026, 3, 1, 10, 5)),
        ([0, 5, 10], dt(2026, 3, 1, 10, 10, 0, 1), dt(2026, 3, 1, 11, 0)),  # across the hour
        ([30], dt(2026, 3, 1, 10, 30, 0, 1), dt(2026, 3, 1, 11, 30)),  # a whole hour later
        ([0], dt(2026, 3, 1, 23, 59, 59), dt(2026, 3, 2, 0, 0)),  # across the day
        ([0], dt(2026, 12, 31, 23, 0, 0), dt(2027, 1, 1, 0, 0)),  # across the year
        ([59], dt(2026, 3, 1, 10, 58, 30), dt(2026, 3, 1, 10, 59)),
        (list(range(60)), dt(2026, 3, 1, 10, 58, 30), dt(2026, 3, 1, 10, 59)),
    ],
)
def test_minute_schedule_next_after(minutes, now, expected):
    assert MinuteSchedule(minutes).next_after(now) == expected


def test_minute_schedule_keeps_the_time_zone():
    tz = datetime.timezone(datetime.timedelta(hours=-3))
    now = dt(2026, 3, 1, 10, 59, 1, tzinfo=tz)
    assert MinuteSchedule([0]).next_after(now) == dt(2026, 3, 1, 11, 0, tzinfo=tz)


def test_minute_schedule_ignores_order_and_duplicates():
    schedule = MinuteSchedule([40, 10, 10])
    assert schedule.minutes == (10, 40)
    assert schedule.next_after(dt(2026, 3, 1, 10, 20)) == dt(2026, 3, 1, 10, 40)
    assert schedule.next_after(dt(2026, 3, 1, 10, 41)) == dt(2026, 3, 1, 11, 10)


def test_minute_schedule_runs_are_a_minute_apart_at_least():
    schedule = MinuteSchedule([0, 1])
    first = schedule.next_after(dt(2026, 3, 1, 10, 59, 59, 999999))
    assert first == dt(2026, 3, 1, 11, 0)
    assert schedule.next_after(first) == dt(2026, 3, 1, 11, 1)


@pytest.mark.parametrize("minutes", [[], [60], [-1], [0, 75]])
def test_minute_schedule_rejects_bad_minutes(minutes):
    with pytest.raises(ValueError):
        MinuteSchedule(minutes)


@pytest.mark.parametrize("seconds", [0.25, 1, 3600])
def test_interval_schedule(seconds):
    now = dt(2026, 3, 1, 10, 59, 59, 500000)
    assert IntervalSchedule(seconds).next_after(now) == now + datetime.timedelta(seconds=seconds)


@pytest.mark.parametrize("seconds", [0, -1])
def test_interval_schedule_rejects_non_positive(seconds):
    with pytest.raises(ValueError):
        IntervalSchedule(seconds)


def test_make_schedule_prefers_the_interval():
    schedule = make_schedule((0, 30), 2.5)
    assert isinstance(schedule, IntervalSchedule)
    assert schedule.seconds == 2.5


def test_make_schedule_uses_the_minutes_without_an_interval():
    schedule = make_schedule((0, 30), None)
    assert isinstance(schedule, MinuteSchedule)
    assert schedule.minutes == (0, 30)
    assert schedule.next_after(dt(2026, 3, 1, 10, 45)) == dt(2026, 3, 1, 11, 0)
