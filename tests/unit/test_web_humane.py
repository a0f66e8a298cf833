"""Times and durations as the console shows them (nsj_queue_lib/web/humane.py)."""

from __future__ import annotations

import datetime

import pytest

from nsj_queue_lib.web.humane import duration, exact, machine, relative

NOW = datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=datetime.timezone.utc)


def before(seconds: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds)).isoformat()


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0.2, "just now"),
        (12.4, "12 s ago"),
        (59.4, "59 s ago"),
        (60, "1 min ago"),
        (3 * 60 + 59, "3 min ago"),
        (2 * 3600 + 10, "2 h ago"),
        (3 * 86400, "3 d ago"),
        (-7200, "in 2 h"),
        (-30, "in 30 s"),
    ],
)
def test_relative_times_read_in_whole_units(seconds, words):
    assert relative(before(seconds), NOW) == words


def test_exact_and_machine_times_drop_the_microseconds_and_say_utc():
    brasilia = datetime.timezone(datetime.timedelta(hours=-3))
    local = datetime.datetime(2026, 11, 29, 9, 5, 7, 654321, tzinfo=brasilia)
    assert exact(local) == "2026-11-29 12:05:07 UTC"
    assert machine(local.isoformat()) == "2026-11-29T12:05:07Z"
    assert exact(None) == machine("") == relative(None, NOW) == ""


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0.0084, "8 ms"),
        (0.9994, "999 ms"),
        (1.25, "1.2 s"),
        (59.9, "59.9 s"),
        (59.97, "1 min 0 s"),
        (184.2, "3 min 4 s"),
        (2 * 3600 + 5 * 60 + 9, "2 h 5 min"),
        (None, ""),
    ],
)
def test_durations_read_in_the_unit_that_fits(seconds, words):
    assert duration(seconds) == words
