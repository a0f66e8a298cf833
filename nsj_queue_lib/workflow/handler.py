"""A running handler's side of workflows (``current_task().parents()``, ``.spawn()``).

Both work on the handler's own connection, inside its task's transaction: a spawned
task exists exactly when the spawning task's success commits (its failure rolls the
spawn back with everything else), and the parents are read as that transaction sees
them (they all ended 'sucesso' before this task was released, unless it was inserted
with ``on_parent_failure="run"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nsj_queue_lib.exceptions import WorkflowUnsupported

if TYPE_CHECKING:
    from nsj_queue_lib.queue_client import QueueClient

# The running task's context (nsj_queue_lib.context.TaskContext, which calls in here): not
# imported, not even for annotations, so that the two modules form no import cycle.
TaskContext = Any


def _client(context: TaskContext) -> QueueClient:
    from nsj_queue_lib.queue_client import QueueClient

    if context.bd_conn is None or context.queue_table is None:
        raise RuntimeError("this task context has no connection (it is not running)")
    client = context.workflow_client
    if client is None or client._conn is not context.bd_conn:
        # One per attempt: building a client prepares its store's statements.
        client = context.workflow_client = QueueClient(context.bd_conn, context.queue_table)
    return client


def spawn(
    context: TaskContext, processo: str, payload: Any, after: Any = None, **insert_options: Any
) -> int:
    """Insert a task of ``processo`` in the handler's transaction (origem: the spawning
    task's id; ``chave_externa`` and the other ``insert_task`` options by keyword)."""
    options = {"origem": f"task:{context.id_inicial}", "destino": processo, **insert_options}
    chave_externa = options.pop("chave_externa", None)
    return _client(context).insert_task(
        options.pop("origem"),
        options.pop("destino"),
        processo,
        chave_externa,
        payload,
        after=after,
        **options,
    )


def parents(context: TaskContext) -> dict[int, dict[str, Any]]:
    """{parent's id: get_task's dict of its latest attempt}; the ids are the first attempts'
    ids, which is what ``after=`` was given (insert_task returns them)."""
    client = _client(context)
    try:
        wstore = client._workflow()
        rows = wstore.parents_of(context.bd_conn, context.id_inicial)
    except WorkflowUnsupported:
        return {}
    found: dict[int, dict[str, Any]] = {}
    for parent_id, _latest in rows:
        view = client.get_task(parent_id)
        if view is not None:
            found[parent_id] = view
    return found
