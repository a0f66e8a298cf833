"""A process's id and the lock key its tasks share."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nsj_queue_lib import model

# Every task of a process carries this lock key prefix: its tasks run one at a time, and
# the worker knows a process's task from its row alone (no query for the others).
LOCK_KEY_PREFIX = "process:"
# The process_id columns' size (varchar(190)); with the prefix it fits the lock_key column.
PROCESS_ID_LIMIT = 190
assert PROCESS_ID_LIMIT + len(LOCK_KEY_PREFIX) <= model.TEXT_LIMITS["lock_key"]
START, CALL, REPAIR, TIMER = "start", "call", "repair", "timer"
KINDS = (START, CALL, REPAIR, TIMER)
CORRUPTED = "corrupted"


def check_process_id(value: Any) -> str:
    """``value`` as a process id; ``ValueError`` naming ``process_id`` otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"process_id must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError("process_id must be a non-empty string")
    if len(value) > PROCESS_ID_LIMIT:
        raise ValueError(f"process_id is longer than {PROCESS_ID_LIMIT} characters ({len(value)})")
    return value


def lock_key_of(process_id: str) -> str:
    return LOCK_KEY_PREFIX + process_id


def reserved_lock_key(key: Any) -> bool:
    """Whether a lock key given by hand takes a process's (they are the process's own)."""
    return isinstance(key, str) and key.startswith(LOCK_KEY_PREFIX)


def process_id_of(row: Mapping[str, Any]) -> str | None:
    """The process a claimed row's task belongs to, or None."""
    key = row.get("lock_key")
    if isinstance(key, str) and key.startswith(LOCK_KEY_PREFIX):
        return key[len(LOCK_KEY_PREFIX) :]
    return None


def json_text(value: Any, what: str) -> str:
    """``value`` as JSON text; ``ValueError`` naming ``what`` when JSON cannot hold it."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be a JSON value: {exc}") from None
