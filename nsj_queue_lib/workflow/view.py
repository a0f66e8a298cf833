"""A workflow as its user sees it (``QueueClient.get_workflow``) and its cancellation
(``QueueClient.cancel_workflow``).

The workflow's status is derived from its tasks' latest attempts, never stored (so it
cannot disagree with them):

- ``running``: some task has work ahead of it (waiting for parents, due, running, or
  failed with a retry ahead);
- ``succeeded``: every task ended 'sucesso';
- ``failed``: every task ended, and at least one failed for good (ran out of attempts
  or failed permanently); the tasks it cancelled are 'cancelada';
- ``cancelled``: every task ended, none failed, and at least one was cancelled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.db.workflows_store import WorkflowsStore
from nsj_queue_lib.exceptions import NotFoundError
from nsj_queue_lib.task_views import task_view

# A QueueClient (which calls in here): not imported, not even for annotations, so that
# the two modules form no import cycle.
QueueClient = Any

RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
WORKFLOW_STATUSES = (RUNNING, SUCCEEDED, FAILED, CANCELLED)
_FAILURES = (model.FALHA, model.FALHA_PROCESSANDO)


def task_ended(row: Mapping[str, Any]) -> bool:
    """Whether a task's latest attempt ends it ('sucesso', 'cancelada', or a failure with
    nothing after it: out of attempts, or permanent)."""
    status = row["status"]
    if status in (model.SUCESSO, model.CANCELADA):
        return True
    return status in _FAILURES and (bool(row["estouro_tentativas"]) or not row["reenfileirado"])


def workflow_status(rows: Sequence[Mapping[str, Any]]) -> str:
    """The workflow's status from its tasks' latest attempts (see the module's docstring)."""
    if not all(task_ended(row) for row in rows):
        return RUNNING
    statuses = {row["status"] for row in rows}
    if statuses & set(_FAILURES):
        return FAILED
    if model.CANCELADA in statuses:
        return CANCELLED
    return SUCCEEDED


def _store(client: QueueClient) -> WorkflowsStore:
    return WorkflowsStore.for_store(client._store, client.queue_table)


def get_workflow(client: QueueClient, workflow_id: int) -> dict[str, Any] | None:
    """``id``, ``name``, ``created_at``, ``status``, ``counts`` (tasks per status) and
    ``tasks``: each task's ``get_task`` dict with its ``processo``, ``chave_externa`` and
    ``parents`` (ids), in the order added; None for an unknown id."""
    store = _store(client)
    conn = client._conn
    found = store.workflow(conn, workflow_id)
    if found is None:
        return None
    rows = store.workflow_tasks(conn, workflow_id)
    parents: dict[int, list[int]] = {}
    for parent, child in store.workflow_edges(conn, workflow_id):
        parents.setdefault(child, []).append(parent)
    tasks = []
    for row in rows:
        view = task_view(row)
        view["processo"] = row["processo"]
        view["chave_externa"] = row["chave_externa"]
        view["parents"] = parents.get(view["id_inicial"], [])
        tasks.append(view)
    return {
        **found,
        "status": workflow_status(rows),
        "counts": dict(Counter(task["status"] for task in tasks)),
        "tasks": tasks,
    }


def cancel_workflow(client: QueueClient, workflow_id: int) -> dict[int, str]:
    """Cancel the workflow's unfinished tasks, in the caller's transaction: waiting ones
    ('aguardando', 'pendente', 'agendada') become 'cancelada', running ones are asked to
    stop (``cancel_task``'s rules). Parents first: a cancelled parent cancels its waiting
    children on the way. ``{task id: status after the call}``; ``NotFoundError`` for an
    unknown id."""
    store = _store(client)
    conn = client._conn
    if store.workflow(conn, workflow_id) is None:
        raise NotFoundError(f"workflow {workflow_id} not found in {client.queue_table}")
    after: dict[int, str] = {}
    for row in store.workflow_tasks(conn, workflow_id):
        task_id = int(row["id_inicial"])
        if task_ended(row):
            after[task_id] = str(row["status"])
        else:
            after[task_id] = client.cancel_task(task_id)
    return after


def workflow_of_task(client: QueueClient, task_id: int) -> int | None:
    """The id of the workflow the task belongs to, or None."""
    return _store(client).workflow_of_task(client._conn, task_id)
