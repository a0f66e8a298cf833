"""How a Django task call is written in the queue table, and read back.

- ``payload``: JSON ``{"task": module path, "args": [...], "kwargs": {...},
  "queue_name": ..., "priority": ..., "run_after": ISO 8601 or null}``; the worker
  imports the task by its path and calls it with the arguments.
- ``prioridade``: Django's -100..100 shifted to 0..200, so that the order is kept
  exactly (higher first in both); Django's default 0 becomes 100.
- A result's id: ``"<queue_name>:<id>"``, the Django queue (which names the table) and
  the task's first attempt id (what ``nsjq show`` takes).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

from nsj_queue_lib.contrib.django.compat import TASK_MIN_PRIORITY, Task


def queue_priority(priority: int) -> int:
    """The ``prioridade`` of a Django priority (-100..100 -> 0..200)."""
    return int(priority) - TASK_MIN_PRIORITY


def call_payload(task: Task, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The payload of one call of ``task``. Arguments go through JSON, as Django's own
    backends require (a tuple comes back a list); anything else raises ``TypeError``."""
    return {
        "task": task.module_path,
        "args": json.loads(json.dumps(list(args))),
        "kwargs": json.loads(json.dumps(dict(kwargs))),
        "queue_name": task.queue_name,
        "priority": task.priority,
        "run_after": None if task.run_after is None else task.run_after.isoformat(),
    }


def read_payload(text: str | None) -> dict[str, Any] | None:
    """The call a payload describes; None for a payload this backend did not write."""
    try:
        call = json.loads(text or "")
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("task"), str):
        return None
    if not isinstance(call.get("args"), list) or not isinstance(call.get("kwargs"), dict):
        return None
    return call


def run_after(call: Mapping[str, Any]) -> datetime.datetime | None:
    value = call.get("run_after")
    return None if value is None else datetime.datetime.fromisoformat(value)


def result_id(queue_name: str, task_id: int) -> str:
    return f"{queue_name}:{task_id}"


def parse_result_id(value: str) -> tuple[str, int] | None:
    """(queue name, first attempt id) of a result id; None for any other text."""
    queue_name, _, number = str(value).rpartition(":")
    if not queue_name or not number.isdigit():
        return None
    return queue_name, int(number)
