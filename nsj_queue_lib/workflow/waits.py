"""Durable waits: ``current_task().sleep(seconds)``, ``.wait_event(name, timeout_s)`` and
``QueueClient.send_event(task_id, name, payload)``.

A wait is a checkpoint (``steps.py``) named after its place in the handler: the
n-th sleep of a task is ``sleep:<n>``, its n-th wait for an event ``name`` is
``event:<name>:<n>`` (counted per attempt, so a handler re-entered from its
start meets its waits under the same names, as its steps). The checkpoint
holds when the wait ends (the database's clock, so every worker agrees).

A wait that has not ended commits the handler's work so far with its
checkpoint, writes the attempt 'pendente' again, due when the wait ends, frees
its liveness lock, and ends the attempt without failing it (``TaskSuspended``
through the handler to the worker): no retry is counted, the executor is free
at once. The task is claimed again when it is due, and its handler runs from
its start: finished steps return at once, an ended sleep returns, a wait whose
event arrived returns its payload, one whose time passed raises
``TimeoutError``.

Events are rows of ``<queue>_events`` keyed by the task's first attempt's id,
written in the sender's transaction, whether or not the task waits yet (an
early event is kept). The n-th ``wait_event(name)`` of a task gets its n-th
event of that name. ``send_event`` locks the task's latest attempt row, the row
a suspending worker locks too, so the two take turns: either the worker sees
the event before it suspends (and does not), or ``send_event`` sees the task
'pendente' with a checkpoint waiting for that name and makes it due now (on
PostgreSQL its NOTIFY wakes the workers at commit).
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

from nsj_queue_lib.db.step_store import StepStore
from nsj_queue_lib.exceptions import NotFoundError, TaskSuspended
from nsj_queue_lib.workflow.steps import (
    check_name,
    checkpoint,
    checkpoints_of,
    fence,
    step_store,
)

TaskContext = Any

SLEEP_PREFIX = "sleep:"
EVENT_PREFIX = "event:"
# An event's name, with room in the checkpoint's name for the prefix and the wait's number.
EVENT_NAME_LIMIT = 180
# A wait that ends within this many seconds of now has ended: no attempt is spent on it.
SLACK_S = 0.001


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be >= 0 and finite, got {value}")
    return float(value)


def _next_number(context: TaskContext, key: str) -> int:
    """The n-th wait of this kind in the handler's run (1 first)."""
    counts = context.wait_counts
    counts[key] = counts.get(key, 0) + 1
    return int(counts[key])


def sleep(context: TaskContext, seconds: float) -> None:
    """Return once ``seconds`` have passed since the first attempt that reached here; until
    then, end the attempt (``TaskSuspended``) to be resumed when they have."""
    seconds = _seconds("seconds", seconds)
    store = step_store(context)
    name = f"{SLEEP_PREFIX}{_next_number(context, 'sleep')}"
    conn = context.bd_conn
    now = store.now(conn)
    stored = store.result(conn, context.id_inicial, name)
    if stored is None:
        until = now + seconds
        if seconds <= SLACK_S:
            checkpoint(context, store, name, json.dumps({"until": until}))
            return
    else:
        until = float(json.loads(stored)["until"])
        if until - now <= SLACK_S:
            return
    _suspend(context, store, name, until, None, f"sleeping until {_utc(until)}")


def wait_event(context: TaskContext, name: str, timeout_s: float) -> Any:
    """The payload of the task's next event ``name``; ``TimeoutError`` once ``timeout_s``
    passed (counted from the first attempt that waited here)."""
    check_name(name, "an event's name", EVENT_NAME_LIMIT)
    timeout_s = _seconds("timeout_s", timeout_s)
    store = step_store(context)
    number = _next_number(context, EVENT_PREFIX + name)
    key = f"{EVENT_PREFIX}{name}:{number}"
    conn = context.bd_conn
    stored = store.result(conn, context.id_inicial, key)
    state = json.loads(stored) if stored is not None else None
    if state is not None and "payload" in state:
        return json.loads(state["payload"]) if state["payload"] is not None else None
    if state is not None and state.get("timed_out"):
        raise _timed_out(context, name, timeout_s)
    # Whether it arrived: locked, so a sender commits before or after this attempt ends.
    fence(context, store)
    event = store.nth_event(conn, context.id_inicial, name, number - 1)
    if event is not None:
        checkpoint(context, store, key, json.dumps({"payload": event[0]}))
        return json.loads(event[0]) if event[0] is not None else None
    now = store.now(conn)
    until = now + timeout_s if state is None else float(state["until"])
    if until - now <= SLACK_S:
        # Recorded, so that a later attempt of the task (a retry) times out here too, even
        # if the event arrived since: the handler's run repeats what happened.
        checkpoint(context, store, key, json.dumps({"until": until, "timed_out": True}))
        raise _timed_out(context, name, timeout_s)
    mensagem = f"waiting for event {name!r} until {_utc(until)}"
    _suspend(context, store, key, until, name, mensagem)


def _utc(epoch: float) -> str:
    """The end of a wait, as the task's ``mensagem`` says it."""
    moment = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds")


def _timed_out(context: TaskContext, name: str, timeout_s: float) -> TimeoutError:
    return TimeoutError(f"task {context.id_inicial}: no event {name!r} within {timeout_s} s")


def _suspend(
    context: TaskContext,
    store: StepStore,
    key: str,
    until: float,
    waiting_for: str | None,
    mensagem: str,
) -> None:
    """Commit the work so far with the wait's checkpoint, the attempt 'pendente' again (due
    at ``until``) and its liveness lock freed; then end the attempt."""
    conn = context.bd_conn
    fence(context, store)
    store.save(conn, context.id_inicial, key, json.dumps({"until": until}), context.id, waiting_for)
    store.suspend(conn, context.id, until, mensagem)
    context.commits.release()
    context.suspension = TaskSuspended(mensagem)
    raise context.suspension


def send_event(
    conn: Any, queue_store: Any, queue_table: str, task_id: int, name: str, payload: Any = None
) -> None:
    """Store the event in the caller's transaction on ``conn``; a task waiting for it is due
    now. ``queue_store``: the client's, which names the dialect."""
    check_name(name, "an event's name", EVENT_NAME_LIMIT)
    text = None if payload is None else json.dumps(payload)
    store = checkpoints_of(queue_store, queue_table)
    found = store.latest_attempt(conn, task_id)
    if found is None:
        raise NotFoundError(f"send_event: no task {task_id} in {queue_table}")
    latest, first, _status = found
    store.add_event(conn, first, name, text)
    store.wake_waiting(conn, latest, first, name)
