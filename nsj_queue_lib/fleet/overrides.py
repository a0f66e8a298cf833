"""A task's own overrides of its processo's options, given at enqueue.

``insert_task(..., max_retry=, timeout_s=, next_try_priority=)`` (and the same keys per
item of ``insert_tasks``) are stored in the task's row (``model.OVERRIDE_COLUMNS``),
carried by its retries and returned by the claims. A value wins over the ``@Task``
option, which wins over the queue's default (QUEUE_MAX_RETRY, QUEUE_TASK_TIMEOUT);
``next_try_priority`` is the ``prioridade`` its retries get (seed 003).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nsj_queue_lib.model import OVERRIDE_COLUMNS
from nsj_queue_lib.settings_checks import out_of_bounds

# option -> (integer, minimum, strictly positive), as @Task checks its own.
_BOUNDS = {
    "max_retry": (True, 1, False),
    "timeout_s": (False, None, True),
    "next_try_priority": (True, 0, False),
}
_INT_MAX = 2**31 - 1


def checked_overrides(args: Mapping[str, Any]) -> dict[str, Any]:
    """The overrides of ``args`` as insert parameters (None: not given); ``ValueError``
    naming the option for a bad value, before any SQL is sent."""
    found: dict[str, Any] = {}
    for option in OVERRIDE_COLUMNS:
        value = args.get(option)
        if value is not None:
            integer, minimum, positive = _BOUNDS[option]
            why = out_of_bounds(value, integer, minimum, _INT_MAX if integer else None, positive)
            if why:
                raise ValueError(f"{option} {why}")
            value = int(value) if integer else float(value)
        found[option] = value
    return found


def has_overrides(row: Mapping[str, Any]) -> bool:
    """Whether the insert parameters ``row`` carry an override (the insert then names
    the override columns)."""
    return any(row.get(option) is not None for option in OVERRIDE_COLUMNS)
