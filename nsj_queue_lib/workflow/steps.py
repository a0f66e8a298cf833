"""Durable steps: ``current_task().step(name, fn, *args)`` and durable pipelines.

A step's checkpoint is a row of ``<queue>_steps`` keyed by the task's first
attempt's id (``id_inicial``: every attempt of the task shares it) and the
step's name, holding ``fn``'s result as JSON. The first time, ``fn(*args)`` runs
on the handler's connection, inside the task's transaction; then the checkpoint
is written there and the transaction commits (``runtime/handler_commits.py``):
``fn``'s writes and the checkpoint commit together, or neither does. Any later
attempt finds the checkpoint and gets the stored result without running ``fn``.

The commit is fenced: before it, the attempt's own row is read locked and must
still be 'processando' (its liveness lock normally guarantees that; a lost
lock server connection does not). The row stays locked until the commit, so
the retry service cannot rescue the task in between. Should the fence fail,
``AttemptFenced`` is raised into the handler: another worker runs the task now,
and nothing of this attempt after its last step is kept.

A step returns the JSON round trip of ``fn``'s result (a tuple comes back as a
list, dict keys as strings), the first time as on replays, so that the code
after it sees the same value either way.

Durable pipelines (``@Task(..., durable_steps=True)``): each ``yield`` of a
generator handler commits the work done since the previous one, with a
checkpoint named ``yield:<n>`` (the n-th yield over all the task's attempts).
Python cannot resume a generator where a dead process left it, so a later
attempt runs the generator from its start; ``current_task().durable_yields``
says how many yields earlier attempts committed, for the generator to skip
that work.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from nsj_queue_lib.db.step_store import StepStore
from nsj_queue_lib.exceptions import AttemptFenced

# The running task's context (nsj_queue_lib.context.TaskContext, which calls in here).
TaskContext = Any

NAME_LIMIT = 200  # the steps table's name column
YIELD_PREFIX = "yield:"
# The names the library gives its own checkpoints start so (a durable pipeline's yields,
# durable waits: waits.py); a step may not take one.
RESERVED_PREFIXES = (YIELD_PREFIX, "sleep:", "event:")


def checkpoints_of(queue_store: Any, queue_table: str) -> StepStore:
    """The checkpoints and events next to a queue store: its own where it keeps them (the
    in-memory queue's, testing/steps.py), else the database's (one per dialect and queue,
    cached: the store names the dialect)."""
    own = getattr(queue_store, "steps", None)
    if own is not None:
        found: StepStore = own
        return found
    return StepStore.for_store(queue_store, queue_table)


def check_name(name: Any, what: str = "a step's name", limit: int = NAME_LIMIT) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"{what} is a non-empty str, got {name!r}")
    if len(name) > limit:
        raise ValueError(f"{what} is at most {limit} characters")
    return name


def check_step_name(name: Any) -> str:
    check_name(name)
    if name.startswith(RESERVED_PREFIXES):
        raise ValueError(
            f"a step's name may not start with {', '.join(RESERVED_PREFIXES)} (the names of "
            f"durable waits and pipelines' yields), got {name!r}"
        )
    return str(name)


def step_store(context: TaskContext) -> StepStore:
    """The running task's checkpoints (on its handler's connection)."""
    if context.in_step:
        # Its commit would commit part of the enclosing step's work without that step's
        # checkpoint: a retry would run the enclosing step again over it.
        raise RuntimeError("durable steps and waits cannot run inside a step's fn")
    if context.suspension is not None:
        raise RuntimeError("this attempt ended at a durable wait: the task resumes later")
    if context.bd_conn is None or context.queue_table is None or context.commits is None:
        raise RuntimeError(
            "durable steps need a synchronous handler run by a worker (on PostgreSQL or "
            "MySQL/MariaDB) or by InMemoryQueue; not an async def handler"
        )
    store: StepStore = context.commits.steps
    return store


def step(context: TaskContext, name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` once per task: its writes and JSON result committed together."""
    check_step_name(name)
    store = step_store(context)
    conn = context.bd_conn
    stored = store.result(conn, context.id_inicial, name)
    if stored is not None:
        return json.loads(stored)
    context.in_step = True
    try:
        result = json.dumps(fn(*args))  # TypeError for a result JSON cannot hold
    finally:
        context.in_step = False
    checkpoint(context, store, name, result)
    return json.loads(result)


def checkpoint(
    context: TaskContext, store: StepStore, name: str, result: str, waiting_for: str | None = None
) -> None:
    """Write a checkpoint and commit the handler's transaction with it, fenced."""
    fence(context, store)
    store.save(context.bd_conn, context.id_inicial, name, result, context.id, waiting_for)
    context.commits.keep()


def fence(context: TaskContext, store: StepStore) -> None:
    """The attempt still owns its task: its row 'processando', locked until the commit; a
    process's task writes its process's state, which commits then too."""
    context.commits.prepare()
    if not store.owns(context.bd_conn, context.id):
        raise AttemptFenced(
            f"task {context.id_inicial}: attempt {context.id} is no longer 'processando' "
            "(another worker rescued it); this step was not committed"
        )
    if context.process is not None:
        # A process's task: its state so far commits with the step or wait (process/).
        context.process.save_now()


# -- durable pipelines --


def yields_done(context: TaskContext) -> int:
    """How many yields of a durable pipeline earlier attempts committed."""
    store = step_store(context)
    return store.count_prefixed(context.bd_conn, context.id_inicial, YIELD_PREFIX)


def keep_yield(context: TaskContext, number: int, value: Any) -> None:
    """A durable pipeline's ``number``-th yield: its work so far committed with a checkpoint
    holding the yielded value (as text when JSON cannot hold it)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = json.dumps(repr(value))
    checkpoint(context, step_store(context), f"{YIELD_PREFIX}{number}", text)
