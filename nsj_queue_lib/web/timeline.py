"""The task page's timeline: each attempt as one row, waiting from when it was due until a
worker claimed it, then running until it ended (``started_at``, ``finished_at``).

An operator sees at a glance where a task's time went: queued behind a backlog, in a
slow handler, or in the back-off between retries. Rows written by 1.2.2's workers have no
start or end; a task none of whose attempts has either gets no timeline.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.web.humane import instant

WIDTH = 600  # viewBox units across; the SVG scales to the page's width
ROW_HEIGHT = 16
BAR_HEIGHT = 10
MIN_BAR = 2.0  # a few milliseconds of running must still show


@dataclasses.dataclass(frozen=True)
class Bar:
    """One attempt's row: ``x``/``width`` in viewBox units, None where nothing is drawn."""

    id: int
    tentativa: int
    status: str
    y: int
    wait_x: float | None
    wait_width: float | None
    run_x: float | None
    run_width: float | None
    waited_s: float | None
    ran_s: float | None
    worker: str | None


@dataclasses.dataclass(frozen=True)
class Timeline:
    bars: list[Bar]
    start: str  # ISO 8601, the earliest instant shown
    seconds: float  # the span shown
    width: int = WIDTH

    @property
    def height(self) -> int:
        return ROW_HEIGHT * len(self.bars)


def _seconds(later: datetime.datetime | None, earlier: datetime.datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return round(max((later - earlier).total_seconds(), 0.0), 3)


def attempt_times(
    attempt: dict[str, Any], now: datetime.datetime
) -> tuple[datetime.datetime | None, ...]:
    """(due, started, ended) of an attempt; an unfinished one ends now, where it has begun
    (started, or due and waiting), else not at all."""
    due, started = instant(attempt.get("data_hora")), instant(attempt.get("started_at"))
    ended = instant(attempt.get("finished_at"))
    if ended is None and attempt.get("status") in model.ACTIVE_STATUSES:
        began = started or (due if due is not None and due <= now else None)
        ended = now if began is not None else None
    return due, started, ended


def durations(attempt: dict[str, Any], now: datetime.datetime) -> tuple[float | None, ...]:
    """(seconds waited from due to start, seconds run from start to end) of an attempt."""
    due, started, ended = attempt_times(attempt, now)
    return _seconds(started, due), _seconds(ended, started)


def timeline(attempts: Sequence[dict[str, Any]], now: datetime.datetime) -> Timeline | None:
    """The bars of ``attempts`` (oldest first), scaled to one span; None when no attempt
    has a start or an end to show."""
    times = [attempt_times(a, now) for a in attempts]
    if not any(started or ended for _, started, ended in times):
        return None
    instants = [t for row in times for t in row if t is not None]
    first, last = min(instants), max(instants)
    span = max((last - first).total_seconds(), 1e-3)

    def x(instant: datetime.datetime) -> float:
        return round((instant - first).total_seconds() / span * WIDTH, 2)

    bars = []
    for row, (attempt, (due, started, ended)) in enumerate(zip(attempts, times, strict=True)):
        waited_until = started or ended
        wait = (x(due), x(waited_until) - x(due)) if due and waited_until else (None, None)
        run = (x(started), max(x(ended) - x(started), MIN_BAR)) if started and ended else None
        if started and not ended:
            run = (x(started), MIN_BAR)
        bars.append(
            Bar(
                id=int(attempt["id"]),
                tentativa=int(attempt.get("tentativa") or 1),
                status=str(attempt.get("status")),
                y=row * ROW_HEIGHT + (ROW_HEIGHT - BAR_HEIGHT) // 2,
                wait_x=wait[0],
                wait_width=wait[1] if wait[1] else None,
                run_x=None if run is None else run[0],
                run_width=None if run is None else run[1],
                waited_s=_seconds(started, due),
                ran_s=_seconds(ended, started),
                worker=attempt.get("worker"),
            )
        )
    return Timeline(bars, first.isoformat(), round(span, 3))
