"""Pause and resume a queue, or one processo of it, across every worker.

``QueueClient.pause(processo=None, until=None)`` writes the pause in the caller's
transaction; from its commit on, no claim of any worker takes a task it holds
(db/pause_conditions.py says how the claims read it). Tasks already running finish.
``until`` (an aware datetime) ends it by itself, by the database's clock;
``resume`` ends it at once and, on PostgreSQL, wakes the queue's workers at
commit. ``pause()`` and ``resume()`` without a processo are the whole queue's;
a processo's pause and the whole queue's are separate rows.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from nsj_queue_lib.model import TEXT_LIMITS

# The key of the whole queue's pause in the limits table: never a processo (a processo
# is a non-empty string).
QUEUE_ROW = ""

UTC = datetime.timezone.utc
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)


@dataclasses.dataclass(frozen=True)
class Pause:
    """A pause in force: its processo (None: the whole queue) and its end (None: until
    resumed)."""

    processo: str | None
    until: datetime.datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "processo": self.processo,
            "until": None if self.until is None else self.until.isoformat(),
        }


def checked_processo(processo: Any) -> str:
    """The limits-table key of ``processo`` (None: the whole queue's)."""
    if processo is None:
        return QUEUE_ROW
    if not isinstance(processo, str) or not processo.strip():
        raise ValueError("processo must be a non-empty string or None (the whole queue)")
    if len(processo) > TEXT_LIMITS["processo"]:
        raise ValueError(f"processo is longer than {TEXT_LIMITS['processo']} characters")
    return processo


def checked_until(until: Any) -> int | None:
    """``until`` as microseconds since 1970, exact; ``ValueError`` unless an aware
    datetime or None."""
    if until is None:
        return None
    if not isinstance(until, datetime.datetime) or until.utcoffset() is None:
        raise ValueError(f"until must be a timezone-aware datetime or None, got {until!r}")
    return (until - EPOCH) // datetime.timedelta(microseconds=1)
