"""Circuit breakers: ``@Task(..., circuit_breaker=(failures, cool_down_s))``.

After ``failures`` consecutive failed attempts of the processo (across every worker of
the queue), its breaker opens: no task of it starts for ``cool_down_s`` seconds. Then
exactly one trial task starts (the limited claim takes it and marks the trial, so no
other claim starts a task of the processo meanwhile); its success closes the breaker,
its failure opens it again for another cool-down. The state lives in the processo's
row of the limits table (``breaker_failures``, ``breaker_open``, ``breaker_until``,
``breaker_trial``), which every claim reads (db/pause_conditions.py); each worker with
breakers writes it from a thread of its own (fleet/breaker_recorder.py), after the
attempt settled, so an attempt's commit never waits for it.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from nsj_queue_lib.settings_checks import out_of_bounds

MAX_COOL_DOWN_S = 7 * 86400.0
MAX_FAILURES = 1_000_000


def breaker_problem(value: Any) -> str | None:
    """Why ``value`` is not a ``(failures, cool_down_s)`` pair, or None (None is fine)."""
    if value is None:
        return None
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        return f"must be a pair (failures, cool_down_s), got {value!r}"
    failures, cool_down = value
    why = out_of_bounds(failures, True, 1, MAX_FAILURES, False)
    if why:
        return f"failures {why}"
    why = out_of_bounds(cool_down, False, None, MAX_COOL_DOWN_S, True)
    if why:
        return f"cool_down_s {why}"
    return None


@dataclasses.dataclass(frozen=True)
class BreakerState:
    """A processo's breaker as the limits table holds it."""

    processo: str
    failures: int
    open: bool
    trial: bool
    until: datetime.datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "processo": self.processo,
            "failures": self.failures,
            "state": ("half_open" if self.trial else "open") if self.open else "closed",
            "until": None if self.until is None else self.until.isoformat(),
        }


class Decision:
    """What one recorded outcome does to a breaker (pure: the recorder writes it)."""

    NOTHING = "nothing"
    OPEN = "open"  # open, or open again after a failed trial
    CLOSE = "close"  # a trial succeeded, or a success ended a run of failures


def after_failure(state: BreakerState, threshold: int) -> str:
    """A failure, already counted in ``state`` (``failures`` includes it)."""
    if state.open:
        # Only the trial decides an open breaker; a task that was running when it
        # opened and fails now changes nothing.
        return Decision.OPEN if state.trial else Decision.NOTHING
    return Decision.OPEN if state.failures >= threshold else Decision.NOTHING


def after_success(state: BreakerState) -> str:
    if state.open:
        return Decision.CLOSE if state.trial else Decision.NOTHING
    return Decision.CLOSE if state.failures > 0 else Decision.NOTHING
