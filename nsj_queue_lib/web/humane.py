"""Times and durations as an operator reads them: "3 min ago", "in 2 h", "1.2 s".

The console shows a relative time in a ``<time>`` element whose ``datetime`` is the
instant (to the second) and whose title is the exact time in UTC: the words answer
"how long ago" at a glance, the hover answers "when exactly". ``static/console.js``
rewrites the words as time passes with the same rules (``relative``), so keep the two
in step.
"""

from __future__ import annotations

import datetime
from typing import Any

MINUTE = 60
HOUR = 3600
DAY = 86400


def instant(value: Any) -> datetime.datetime | None:
    """A time column's value (an aware datetime, or its ISO 8601 text) as a datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime.datetime):
        return value
    return datetime.datetime.fromisoformat(str(value))


def machine(value: Any) -> str:
    """The instant in UTC to the second, as ``<time datetime>`` wants it."""
    moment = instant(value)
    if moment is None:
        return ""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def exact(value: Any) -> str:
    """The instant in UTC to the second, for people (a ``title``)."""
    moment = instant(value)
    if moment is None:
        return ""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def relative(value: Any, now: datetime.datetime) -> str:
    """Words such as "12 s ago", "3 min ago", "in 2 h", "just now": whole units, rounded down."""
    moment = instant(value)
    if moment is None:
        return ""
    delta = (now - moment).total_seconds()
    seconds = int(abs(delta) + 0.5)
    if seconds < 1:
        return "just now"
    span = _span(seconds)
    return f"{span} ago" if delta > 0 else f"in {span}"


def _span(seconds: int) -> str:
    if seconds < MINUTE:
        return f"{seconds} s"
    if seconds < HOUR:
        return f"{seconds // MINUTE} min"
    if seconds < DAY:
        return f"{seconds // HOUR} h"
    return f"{seconds // DAY} d"


def duration(seconds: float | None) -> str:
    """A duration: "8 ms", "1.2 s", "3 min 4 s", "2 h 5 min" ("" for None)."""
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < MINUTE - 0.05:  # 59.96 s would read "60.0 s"
        return f"{seconds:.1f} s"
    whole = int(seconds + 0.5)
    if whole < HOUR:
        return f"{whole // MINUTE} min {whole % MINUTE} s"
    return f"{whole // HOUR} h {whole % HOUR // MINUTE} min"


# The Jinja filters (console.templates()).
FILTERS = {"machine": machine, "exact": exact, "relative": relative, "duration": duration}
