"""The client's side of process instances: start, call, repair, read.

All of it runs in the caller's transaction on the client's connection: a process and
its first task exist exactly when the caller commits, as any task does. Every argument
is checked before the first statement is sent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nsj_queue_lib.db.process_store import ProcessStore
from nsj_queue_lib.exceptions import NotFoundError, ProcessCorruptedError, ProcessExistsError
from nsj_queue_lib.process.ids import (
    CALL,
    REPAIR,
    START,
    check_process_id,
    lock_key_of,
)
from nsj_queue_lib.task_rows import task_row
from nsj_queue_lib.workflow.dependencies import check_after

# The client (nsj_queue_lib.queue_client.QueueClient, which calls in here): not imported,
# not even for annotations, so that the two modules form no import cycle.
QueueClient = Any

# What start_process, call_process and repair_process take besides their own arguments:
# insert_task's options (a process's tasks share one lock key: no lock_key of their own).
INSERT_OPTIONS = frozenset(
    {
        "origem",
        "destino",
        "chave_externa",
        "tenant",
        "grupo_empresarial",
        "data_hora",
        "prioridade",
        "max_retry",
        "timeout_s",
        "next_try_priority",
        "fair_key",
        "partition_key",
        "after",
        "on_parent_failure",
    }
)
DEFAULT_ORIGEM = "process"
CHAVE_EXTERNA_LIMIT = 100
RECENT = 20


def process_store(client: QueueClient) -> ProcessStore:
    return ProcessStore.for_store(client._store, client.queue_table)


def start_process(
    client: QueueClient, process_id: Any, processo: str, payload: Any, options: Mapping[str, Any]
) -> int:
    """The process ``process_id`` and its first task (kind 'start'); ``ProcessExistsError``
    when the id exists (nothing written)."""
    process_id = check_process_id(process_id)
    row, parents, mode = _task(client, process_id, processo, payload, options)
    store = process_store(client)
    if not store.create(client._conn, process_id, row["processo"]):
        raise ProcessExistsError(f"process {process_id!r} exists in {client.queue_table}")
    return _insert(client, store, process_id, START, row, parents, mode)


def call_process(
    client: QueueClient,
    process_id: Any,
    processo: str,
    payload: Any,
    options: Mapping[str, Any],
    kind: str = CALL,
) -> int:
    """A task of the process (kind 'call' or 'repair'); ``NotFoundError`` for an unknown
    process, ``ProcessCorruptedError`` for a call to a corrupted one."""
    process_id = check_process_id(process_id)
    row, parents, mode = _task(client, process_id, processo, payload, options)
    return insert_checked(client, process_id, kind, row, parents, mode)


def insert_checked(
    client: QueueClient,
    process_id: str,
    kind: str,
    row: dict[str, Any],
    parents: list[int] | None,
    mode: str,
) -> int:
    """Insert a task of an existing process (``row``: its checked insert parameters)."""
    store = process_store(client)
    found = store.read(client._conn, process_id)
    if found is None:
        raise NotFoundError(f"no process {process_id!r} in {client.queue_table}")
    corrupted_by = found[0]
    if corrupted_by is not None and kind != REPAIR:
        raise ProcessCorruptedError(
            f"process {process_id!r} is corrupted (task {corrupted_by} was dead-lettered): "
            "until a repair succeeds it accepts only repair_process"
        )
    return _insert(client, store, process_id, kind, row, parents, mode)


def insert_process_task(
    client: QueueClient,
    process_id: str,
    kind: str,
    processo: str,
    payload: Any,
    options: Mapping[str, Any],
) -> int:
    """A task of ``process_id`` whose existence the caller knows (a handler's timer)."""
    row, parents, mode = _task(client, process_id, processo, payload, options)
    return _insert(client, process_store(client), process_id, kind, row, parents, mode)


def with_process_key(row: dict[str, Any], process_id: str) -> dict[str, Any]:
    """Insert parameters checked by ``task_row`` given the process's lock key."""
    if row.get("lock_key") is not None:
        raise ValueError(
            "a process's tasks share its lock key: lock_key cannot be combined with process_id"
        )
    if row.get("dedupe_key") is not None:
        # A deduplicated insert answers another task's id, which may be no call of this
        # process: every call of a process is a task of its own.
        raise ValueError("dedupe_key cannot be combined with process_id")
    row["lock_key"] = lock_key_of(process_id)
    return row


def _task(
    client: QueueClient,
    process_id: str,
    processo: str,
    payload: Any,
    options: Mapping[str, Any],
) -> tuple[dict[str, Any], list[int] | None, str]:
    unknown = set(options) - INSERT_OPTIONS
    if unknown:
        raise TypeError(f"unknown insert options: {', '.join(sorted(unknown))}")
    args: dict[str, Any] = {
        "origem": DEFAULT_ORIGEM,
        "destino": processo,
        "chave_externa": process_id if len(process_id) <= CHAVE_EXTERNA_LIMIT else None,
        **options,
        "processo": processo,
        "payload": payload,
    }
    mode = args.get("on_parent_failure", "cancel")
    parents = check_after(args.get("after"), mode)
    row = task_row(args, pub_sub=False, trace_context=client._capture())
    return with_process_key(row, process_id), parents, mode


def _insert(
    client: QueueClient,
    store: ProcessStore,
    process_id: str,
    kind: str,
    row: dict[str, Any],
    parents: list[int] | None,
    mode: str,
) -> int:
    task_id = client._insert_row(row, parents, mode)
    store.add_task(client._conn, task_id, process_id, kind)
    return task_id


# -- reads --


def get_process(
    client: QueueClient, process_id: Any, events: int = RECENT, tasks: int = RECENT
) -> dict[str, Any] | None:
    """The process as a user sees it, or None when unknown (``QueueClient.get_process``)."""
    process_id = check_process_id(process_id)
    for name, value in (("events", events), ("tasks", tasks)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1000:
            raise ValueError(f"{name} must be an int between 0 and 1000, got {value!r}")
    store = process_store(client)
    row = store.get(client._conn, process_id)
    if row is None:
        return None
    recent = store.recent_tasks(client._conn, process_id, tasks) if tasks else []
    found = {
        "process_id": row["process_id"],
        "processo": row["processo"],
        "status": row["status"],
        "detail": row["detail"],
        "state": _json(row["state"]) or {},
        "corrupted": row["corrupted_by"] is not None,
        "corrupted_by": _id(row["corrupted_by"]),
        "remove_at": row["remove_at"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "timers": _timers(store, client._conn, row["timer_task_id"]),
        "events": [
            {
                **event,
                "id": int(event["id"]),
                "task_id": _id(event["task_id"]),
                "payload": _json(event["payload"]),
            }
            for event in (store.recent_events(client._conn, process_id, events) if events else [])
        ],
        "tasks": [_task_view(task) for task in recent],
    }
    return found


def call_response(client: QueueClient, task_id: int) -> Any:
    """The response a process's task returned (its handler's result, once it succeeded);
    None for a task without one. ``NotFoundError`` when ``task_id`` is no process's task."""
    found = process_store(client).task_process(client._conn, task_id)
    if found is None:
        raise NotFoundError(f"task {task_id} is no process's task in {client.queue_table}")
    return _json(found[2])


def _timers(store: ProcessStore, conn: Any, timer_task_id: Any) -> list[dict[str, Any]]:
    """The pending timer (a process has at most one): its task, due at ``data_hora``."""
    if timer_task_id is None:
        return []
    timer = store.task_state(conn, int(timer_task_id))
    if timer is None or timer["status"] not in ("pendente", "agendada"):
        return []
    return [_task_view(timer)]


def _task_view(task: dict[str, Any]) -> dict[str, Any]:
    return {**task, "id": int(task["id"]), "response": _json(task["response"])}


def _json(text: Any) -> Any:
    return None if text is None else json.loads(text)


def _id(value: Any) -> int | None:
    return None if value is None else int(value)
