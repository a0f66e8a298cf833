"""A task's insert parameters, checked: what ``QueueClient`` sends for each task.

Every argument is checked before any SQL is sent; a bad one raises ``ValueError`` (or
``TypeError``) naming it, and nothing is written. Used by the client's inserts, the
periodic service, workflows and process instances alike.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.fleet.fair import checked_fair_key, has_fair_key
from nsj_queue_lib.fleet.overrides import checked_overrides, has_overrides
from nsj_queue_lib.payload import payload_hash, serialize_payload
from nsj_queue_lib.process.ids import reserved_lock_key

TASK_FIELDS = (
    "origem",
    "destino",
    "processo",
    "chave_externa",
    "payload",
    "tenant",
    "grupo_empresarial",
    "data_hora",
    "prioridade",
    "dedupe_key",
    "lock_key",
    *model.OVERRIDE_COLUMNS,
    *model.FAIR_COLUMNS,
    # seed 000's name of fair_key (fleet/fair.py), accepted as its alias.
    "partition_key",
)
# insert_tasks' checks, built once (sets per task cost more than the insert's COPY row).
BULK_FIELDS = frozenset(TASK_FIELDS) | {"pub_sub", "after", "on_parent_failure"}
REQUIRED_FIELDS = frozenset({"origem", "destino", "processo", "chave_externa", "payload"})


def task_row(
    args: Mapping[str, Any], pub_sub: bool, trace_context: str | None = None
) -> dict[str, Any]:
    """Check the arguments of one task and build its insert parameters (``trace_context``:
    the stored form of the enqueuing span's context, ``observability/trace_context.py``)."""
    row: dict[str, Any] = {"trace_context": trace_context}
    for field in ("origem", "destino", "chave_externa", "grupo_empresarial"):
        row[field] = _optional_text(field, args.get(field))
    processo = args.get("processo")
    if not isinstance(processo, str) or not processo.strip():
        raise ValueError("processo must be a non-empty string")
    row["processo"] = _optional_text("processo", processo)

    tenant = args.get("tenant")
    if tenant is not None and (isinstance(tenant, bool) or not isinstance(tenant, int)):
        raise ValueError(f"tenant must be an int or None, got {type(tenant).__name__}")
    row["tenant"] = tenant

    prioridade = args.get("prioridade")
    if prioridade is not None:
        if isinstance(prioridade, bool) or not isinstance(prioridade, int):
            raise ValueError(f"prioridade must be an int or None, got {type(prioridade).__name__}")
        if not 0 <= prioridade <= 2**31 - 1:
            raise ValueError(f"prioridade must be between 0 and 2147483647, got {prioridade}")
    row["prioridade"] = prioridade

    data_hora = args.get("data_hora")
    if data_hora is not None and not isinstance(data_hora, datetime.datetime):
        raise ValueError(f"data_hora must be a datetime or None, got {type(data_hora).__name__}")
    row["data_hora"] = data_hora

    try:
        text = serialize_payload(args.get("payload"))
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    row["payload"] = text
    row["payload_hash"] = payload_hash(text)
    row["pub_sub"] = pub_sub
    for key in ("dedupe_key", "lock_key"):
        row[key] = _optional_text(key, args.get(key))
        if row[key] == "":
            raise ValueError(f"{key} must be a non-empty string or None")
    if reserved_lock_key(row["lock_key"]):
        raise ValueError("lock_key: the prefix 'process:' is reserved (use process_id=)")
    row.update(checked_overrides(args))
    row["fair_key"] = checked_fair_key(_fair_key(args))
    return row


def _fair_key(args: Mapping[str, Any]) -> Any:
    """``fair_key``, or its alias ``partition_key``; ``ValueError`` when both differ."""
    fair_key, alias = args.get("fair_key"), args.get("partition_key")
    if alias is None:
        return fair_key
    if fair_key is not None and fair_key != alias:
        raise ValueError("fair_key and partition_key (its alias) differ: give one of them")
    return alias


def unkeyed(items: Sequence[Any]) -> bool:
    """No item has a dedupe_key, a lock_key, an override, a fair_key or parents (``after``): items
    that are no mappings fail later, in bulk_row."""
    return all(
        isinstance(task, Mapping)
        and task.get("dedupe_key") is None
        and task.get("lock_key") is None
        and not has_overrides(task)
        and not has_fair_key(task)
        and task.get("partition_key") is None
        and not task.get("after")
        for task in items
    )


def bulk_row(index: int, task: Any, trace_context: str | None = None) -> dict[str, Any]:
    """Check item ``index`` of insert_tasks and build its insert parameters."""
    if not isinstance(task, Mapping):
        raise TypeError(f"task #{index} must be a mapping, got {type(task).__name__}")
    unknown = task.keys() - BULK_FIELDS
    if unknown:
        raise ValueError(f"task #{index} has unknown fields: {', '.join(sorted(unknown))}")
    missing = REQUIRED_FIELDS - task.keys()
    if missing:
        raise ValueError(f"task #{index} is missing: {', '.join(sorted(missing))}")
    pub_sub = task.get("pub_sub", False)
    if not isinstance(pub_sub, bool):
        raise ValueError(f"task #{index}: pub_sub must be a bool")
    try:
        return task_row(task, pub_sub=pub_sub, trace_context=trace_context)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"task #{index}: {exc}") from None


def _optional_text(field: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a string or None, got {type(value).__name__}")
    limit = model.TEXT_LIMITS[field]
    if len(value) > limit:
        raise ValueError(f"{field} is longer than {limit} characters ({len(value)})")
    return value
