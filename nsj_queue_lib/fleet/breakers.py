"""Circuit breakers: ``@Task(..., circuit_breaker=(failures, cool_down_s))``.

After ``failures`` consecutive failed attempts of the processo (across every worker of
the queue), its breaker opens: no task of it starts for ``cool_down_s`` seconds. Then
exactly one trial task starts (the limited claim takes it and marks the trial, with its
task's id and start, so no other claim starts a task of the processo meanwhile); its
success closes the breaker, its failure opens it again for another cool-down; the
outcomes of other tasks of the processo (claimed before the breaker opened) change
nothing while it is open. A trial that ends without an outcome (cancelled, released at
a worker's stop, given up after its timeout) lets another trial start; one whose outcome
never came (the worker killed, the outcome lost) counts as failed once ``trial_bound_s``
has passed. The state lives in the processo's row of the limits table
(``breaker_failures``, ``breaker_open``, ``breaker_until``, ``breaker_trial``,
``breaker_trial_at``, ``breaker_trial_task``), which every claim reads
(db/pause_conditions.py); each worker with breakers writes it from a thread of its own
(fleet/breaker_recorder.py), after the attempt settled, so an attempt's commit never
waits for it.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from nsj_queue_lib.settings_checks import out_of_bounds

MAX_COOL_DOWN_S = 7 * 86400.0
MAX_FAILURES = 1_000_000
# How long a trial of a processo without any timeout may stay undecided before it counts
# as failed (with a timeout: the cool-down, the timeout and its grace period).
UNTIMED_TRIAL_BOUND_S = 3600.0


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
    trial_task: int | None = None  # the trial's task (its attempt's id)
    trial_age_s: float | None = None  # seconds since the trial started (the breakers' read)
    trial_timeout_s: float | None = None  # the trial task's own timeout_s, when it has one

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


def is_trial(state: BreakerState, task_id: int | None) -> bool:
    """Whether ``task_id`` is the open breaker's trial: a task that was running when the
    breaker opened, and ends during the trial, is not."""
    return state.open and state.trial and task_id is not None and state.trial_task == task_id


def after_failure(state: BreakerState, threshold: int, task_id: int | None) -> str:
    """A failure of ``task_id``, already counted in ``state`` (``failures`` includes it)."""
    if state.open:
        # Only the trial decides an open breaker.
        return Decision.OPEN if is_trial(state, task_id) else Decision.NOTHING
    return Decision.OPEN if state.failures >= threshold else Decision.NOTHING


def after_success(state: BreakerState, task_id: int | None) -> str:
    if state.open:
        return Decision.CLOSE if is_trial(state, task_id) else Decision.NOTHING
    return Decision.CLOSE if state.failures > 0 else Decision.NOTHING


def trial_bound_s(cool_down_s: float, timeout_s: float | None, grace_s: float) -> float:
    """How long a trial may stay undecided before it counts as failed: past its timeout
    and grace period the worker gives it up (an outcome), so none coming by then means
    the outcome was lost; the cool-down is a margin for the breakers' once-a-second read
    and the clocks. Without a timeout: ``UNTIMED_TRIAL_BOUND_S``."""
    if timeout_s is None:
        return cool_down_s + UNTIMED_TRIAL_BOUND_S
    return cool_down_s + timeout_s + grace_s


def trial_lost(state: BreakerState, bound_s: float) -> bool:
    """Whether the open breaker's trial has been undecided for longer than ``bound_s``."""
    return (
        state.open and state.trial and state.trial_age_s is not None and state.trial_age_s > bound_s
    )
