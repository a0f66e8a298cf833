"""The worker's side of process instances: a task of a process runs with its process.

``run_process_task`` wraps the handler of a task whose lock key names a process: the
process's row is read and locked in the task's transaction, the handler sees it in
``current_task().process``, and what the handler left (``state``, ``status``,
``detail``, its result as the response) is written before the worker commits the
task's success (in a commit group, with the group's settle: ``batch.py``), so it
commits with it, and a failure rolls it back with the rest. A task that changed
nothing writes nothing.

A corrupted process (a task of it failed for good) runs only repair tasks: any other
task of it ends 'cancelada' without running, as does a task of a removed process
(``corruption.py`` corrupts it).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from nsj_queue_lib.db.process_store import ProcessStore
from nsj_queue_lib.exceptions import TaskRefused
from nsj_queue_lib.process.batch import ProcessBatch, ProcessSave
from nsj_queue_lib.process.ids import CALL, CORRUPTED, REPAIR, process_id_of
from nsj_queue_lib.process.instance import ProcessContext

REPAIRED = "repaired"


def run_process_task(
    tarefa: dict[str, Any], context: Any, handler: Callable[[], Any], worker_store: Any
) -> Any:
    """``handler()`` for a task of a process (``process_id_of(tarefa)`` is not None), with
    its process loaded into ``context.process`` and saved after it returned.
    ``worker_store``: the worker's queue store (its ``dialect`` names the SQL)."""
    from nsj_queue_lib.workflow.handler import _client

    process_id = process_id_of(tarefa)
    assert process_id is not None
    if context.bd_conn is None or context.queue_table is None:
        raise RuntimeError("a process's task runs inside a worker (its context has no connection)")
    conn = context.bd_conn
    store = ProcessStore.for_store(worker_store, context.queue_table)
    task_id = int(context.id_inicial)
    batch = getattr(context, "process_batch", None)  # a commit group's (batch.py)
    if batch is not None:
        loaded = batch.load(store, conn, task_id)
    else:
        loaded = store.load_for_task(conn, process_id, task_id)
    if loaded is None:
        raise TaskRefused(f"process {process_id!r} does not exist (removed?): not run")
    loaded["kind"] = loaded["kind"] or CALL
    context.process_kind = loaded["kind"]
    if loaded["corrupted_by"] is not None and loaded["kind"] != REPAIR:
        raise TaskRefused(
            f"process {process_id!r} is corrupted (task {loaded['corrupted_by']} was "
            "dead-lettered): only repair tasks run until one succeeds"
        )
    state = json.loads(loaded["state"]) if loaded["state"] else {}
    # The client (for set_timer) is built on first use: most tasks never need one.
    process = ProcessContext(
        lambda: _client(context), conn, store, process_id, task_id, loaded, state
    )
    context.process = process
    try:
        result = handler()
    finally:
        context.process = None
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if close is not None:
            close()
        raise TypeError("a process's tasks need a synchronous handler (not async def)")
    _save(store, conn, process, result, batch, int(context.id))
    return result


def _save(
    store: ProcessStore,
    conn: Any,
    process: ProcessContext,
    result: Any,
    batch: ProcessBatch | None,
    attempt_id: int,
) -> None:
    """What the handler left, written now, or with its group's commit (``batch``)."""
    state, status, detail = process.written_form()
    if process.kind == REPAIR and status == CORRUPTED:
        status = REPAIRED  # a repair that said nothing still ends the corruption
    save: ProcessSave = (
        process.id,
        process.task_id,
        state,
        status,
        detail,
        process.kind == REPAIR,
        None if result is None else _response(result),
    )
    if _unchanged(process, save):
        return  # a call that only read its process writes nothing
    if batch is not None:
        batch.saves[attempt_id] = save
    else:
        store.save(conn, *save)


def _unchanged(process: ProcessContext, save: ProcessSave) -> bool:
    """Whether writing ``save`` would change nothing: the same state (as JSON text: what was
    stored is ``json_text``'s), status and detail, no response, no repair, and the task is
    not the process's pending timer (whose end clears it)."""
    _, task_id, state, status, detail, repair, response = save
    return (
        state == process.loaded_state
        and status == process.loaded_status
        and detail == process.loaded_detail
        and response is None
        and not repair
        and process.timer_task_id != task_id
    )


def _response(result: Any) -> str:
    """The handler's result as stored for a synchronous caller: as JSON, or its text when
    JSON cannot hold it (as its ``mensagem`` is)."""
    try:
        return json.dumps(result, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return json.dumps(str(result), ensure_ascii=False)
