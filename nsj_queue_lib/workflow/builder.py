"""``Workflow(name)``: a graph of tasks built in memory, then enqueued in one transaction.

``add`` checks each task's arguments at once (``insert_task``'s checks) and returns a
handle that later ``add`` calls name in ``after=``: a task can only wait for tasks added
before it, so a workflow has no cycle by construction. ``enqueue(client)`` inserts every
task in the caller's transaction (one bulk insert where the tasks allow it, then a few
batched statements for the edges, the waiting counts and the workflow's rows) and
returns the workflow's id, its first task's id. Tasks with parents are 'aguardando' and
are released by the dependencies' machinery (``dependencies.py``) as their parents end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nsj_queue_lib.db.own_transaction import own_transaction
from nsj_queue_lib.db.workflows_store import WorkflowsStore
from nsj_queue_lib.workflow.dependencies import ON_PARENT_FAILURE

if TYPE_CHECKING:
    from nsj_queue_lib.queue_client import QueueClient

NAME_LIMIT = 200  # <queue>_workflows.name
# insert_task's keyword options a workflow's task may take (dedupe_key is refused: a
# deduplicated insert returns another task's id, which would join two workflows).
OPTIONS = frozenset(
    {
        "origem",
        "destino",
        "chave_externa",
        "tenant",
        "grupo_empresarial",
        "data_hora",
        "prioridade",
        "lock_key",
        "max_retry",
        "timeout_s",
        "next_try_priority",
        "on_parent_failure",
    }
)


@dataclasses.dataclass(frozen=True, eq=False)
class WorkflowTask:
    """A task added to a ``Workflow``: what ``after=`` names. ``id`` is its task's id once
    the workflow was enqueued (None before)."""

    workflow: Workflow
    index: int
    processo: str

    @property
    def id(self) -> int | None:
        ids = self.workflow.task_ids
        return None if ids is None else ids[self.index]

    def __repr__(self) -> str:
        return f"<WorkflowTask {self.index} {self.processo!r} of {self.workflow.name!r}>"


class Workflow:
    """Tasks and their dependencies, enqueued together (docs/how-to/workflows.md)."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("a workflow's name must be a non-empty string")
        if len(name) > NAME_LIMIT:
            raise ValueError(f"a workflow's name is at most {NAME_LIMIT} characters")
        self.name = name
        self._tasks: list[dict[str, Any]] = []
        self._parents: list[list[int]] = []
        self.task_ids: list[int] | None = None  # set by enqueue
        self.id: int | None = None  # set by enqueue

    def __len__(self) -> int:
        return len(self._tasks)

    def add(
        self,
        processo: str,
        payload: Any,
        after: Iterable[WorkflowTask] | None = None,
        **insert_options: Any,
    ) -> WorkflowTask:
        """Add a task of ``processo``; it runs once every task in ``after`` (handles this
        workflow's ``add`` returned) ended 'sucesso'. ``insert_options``: ``insert_task``'s
        (``chave_externa``, ``prioridade``, ``lock_key``, ``on_parent_failure``, ...;
        ``origem`` defaults to ``workflow:<name>``, ``destino`` to ``processo``)."""
        from nsj_queue_lib.task_rows import task_row

        if self.task_ids is not None:
            raise RuntimeError(f"workflow {self.name!r} was enqueued: build a new one")
        unknown = set(insert_options) - OPTIONS
        if unknown:
            raise TypeError(f"Workflow.add: unknown option(s) {', '.join(sorted(unknown))}")
        parents = self._parent_indexes(after)
        mode = insert_options.get("on_parent_failure", "cancel")
        if mode not in ON_PARENT_FAILURE:
            raise ValueError(f"on_parent_failure must be 'cancel' or 'run', got {mode!r}")
        task = {
            "origem": f"workflow:{self.name}"[:NAME_LIMIT],
            "destino": processo,
            "chave_externa": None,
            **insert_options,
            "processo": processo,
            "payload": payload,
        }
        # insert_task's checks now, so a bad task is refused where it is added.
        task_row({k: v for k, v in task.items() if k != "on_parent_failure"}, pub_sub=False)
        self._tasks.append(task)
        self._parents.append(parents)
        return WorkflowTask(self, len(self._tasks) - 1, processo)

    def _parent_indexes(self, after: Iterable[WorkflowTask] | None) -> list[int]:
        if after is None:
            return []
        if isinstance(after, (str, bytes, WorkflowTask)) or not isinstance(after, Iterable):
            raise TypeError("after must be a list of this workflow's tasks (what add returned)")
        indexes: list[int] = []
        for handle in after:
            if not isinstance(handle, WorkflowTask) or handle.workflow is not self:
                raise TypeError(
                    f"after: {handle!r} is not a task of workflow {self.name!r} (what add returned)"
                )
            if handle.index not in indexes:
                indexes.append(handle.index)
        return indexes

    def enqueue(self, client: QueueClient) -> int:
        """Insert every task in ``client``'s transaction (nothing is committed); returns the
        workflow's id. ``WorkflowUnsupported`` where the queue has no workflow tables
        (SingleStore, or a schema db_gen --upgrade has not reached)."""
        if self.task_ids is not None:
            raise RuntimeError(f"workflow {self.name!r} was enqueued already")
        if not self._tasks:
            raise ValueError(f"workflow {self.name!r} has no tasks")
        store = WorkflowsStore.for_store(client._store, client.queue_table)
        rows = [{k: v for k, v in t.items() if k != "on_parent_failure"} for t in self._tasks]
        # The tasks are inserted 'pendente', then set waiting: on an autocommit connection,
        # in one transaction of the call's own (db/own_transaction.py).
        with own_transaction(client._conn):
            ids = client.insert_tasks(rows)
            edges = [
                (ids[parent], ids[child])
                for child, parents in enumerate(self._parents)
                for parent in parents
            ]
            waiting = [
                (ids[child], len(parents), self._tasks[child].get("on_parent_failure", "cancel"))
                for child, parents in enumerate(self._parents)
                if parents
            ]
            self.id = store.add_workflow(client._conn, self.name, ids, edges, waiting)
        self.task_ids = ids
        return self.id
