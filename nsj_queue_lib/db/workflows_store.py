"""The statements of workflows (``nsj_queue_lib/workflow/builder.py`` and ``view.py``), per
dialect: the dependencies' statements (``WorkflowStore``) and those of
``db/<dialect>/workflow_view.sql`` (the same query names everywhere).

A workflow is a row of ``<queue>_workflows`` (its id is its first task's id) and its
tasks' rows in ``<queue>_workflow_tasks``; its edges are the dependencies' (the parents
table). Every statement runs on the caller's connection, in its transaction, and the
writes are batched: enqueueing a workflow costs a few round trips whatever its size.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from nsj_queue_lib.db.columns import TASK_VIEW_COLUMNS
from nsj_queue_lib.db.dialect import (
    parents_table_name,
    workflow_tasks_table_name,
    workflows_table_name,
)
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.db.workflow_store import WorkflowStore, edge_params


class WorkflowsStore(WorkflowStore):
    """Workflows of the queue ``queue_table`` on a ``dialect`` ('postgres', 'mysql');
    ``WorkflowUnsupported`` elsewhere, as the dependencies."""

    feature = "workflows (Workflow, get_workflow, cancel_workflow)"

    def _render(self, dialect: str, queue_table: str, pins: dict[str, str]) -> dict[str, str]:
        # The dependencies' statements (add_edge, ...) and the workflows' own.
        values = {
            "queue_table": queue_table,
            "parents_table": parents_table_name(queue_table),
            "workflows_table": workflows_table_name(queue_table),
            "workflow_tasks_table": workflow_tasks_table_name(queue_table),
            "task_view_columns": TASK_VIEW_COLUMNS,
            **pins,
        }
        own = render_queries(dialect, values, "workflow_view.sql")
        return {**super()._render(dialect, queue_table, pins), **own}

    @classmethod
    def for_store(cls, store: Any, queue_table: str) -> WorkflowsStore:
        found = super().for_store(store, queue_table)
        assert isinstance(found, WorkflowsStore)
        return found

    def tables(self) -> tuple[str, ...]:
        return (
            *super().tables(),
            workflows_table_name(self.queue_table),
            workflow_tasks_table_name(self.queue_table),
        )

    def _many(self, conn: Any, name: str, params: Sequence[dict[str, Any]]) -> None:
        # One batch: psycopg pipelines executemany, PyMySQL sends a multi-row INSERT.
        if params:
            with self._cursor(conn, name) as cur:
                cur.executemany(self.sql[name], list(params))

    def add_workflow(
        self,
        conn: Any,
        name: str,
        task_ids: Sequence[int],
        edges: Sequence[tuple[int, int]],
        waiting: Sequence[tuple[int, int, str]],
    ) -> int:
        """Record a workflow whose tasks ``task_ids`` (in the order added) were just inserted
        in this transaction: its row, its tasks' rows, the ``edges`` (parent, child) and each
        child's ``waiting`` (child, parents, on_parent_failure), the children set
        'aguardando'. Returns its id (its first task's)."""
        workflow_id = int(task_ids[0])
        self._run(conn, "add_workflow", {"id": workflow_id, "name": name})
        self._many(
            conn,
            "add_workflow_task",
            [
                {"workflow": workflow_id, "seq": seq, "task": task}
                for seq, task in enumerate(task_ids)
            ],
        )
        # Every parent is new: none has ended, so no edge is settled (counted down) yet.
        one_parent = {child for child, pending, _ in waiting if pending == 1}
        edge_rows = [edge_params(p, c, False, c in one_parent) for p, c in edges]
        self._many(conn, "add_edge", edge_rows)
        self._many(
            conn,
            "add_waiting",
            [
                {"child": child, "pending": pending, "on_parent_failure": mode}
                for child, pending, mode in waiting
            ],
        )
        if waiting:
            self._run(conn, "set_waiting", {"ids": self._ids([c for c, _, _ in waiting])})
        return workflow_id

    def workflow(self, conn: Any, workflow_id: int) -> dict[str, Any] | None:
        """The workflow's row (``id``, ``name``, ``created_at``), or None."""
        rows = self._rows(conn, "workflow", {"id": workflow_id})
        if not rows:
            return None
        found, name, epoch = rows[0]
        created_at = datetime.datetime.fromtimestamp(float(epoch), datetime.timezone.utc)
        return {"id": int(found), "name": name, "created_at": created_at}

    def workflow_tasks(self, conn: Any, workflow_id: int) -> list[dict[str, Any]]:
        """Each task's latest attempt (``task_view``'s columns, ``estouro_tentativas``,
        ``processo``, ``chave_externa``), in the order the tasks were added."""
        with self._cursor(conn, "workflow_tasks") as cur:
            cur.execute(self.sql["workflow_tasks"], {"id": workflow_id})
            names = [column[0] for column in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def workflow_edges(self, conn: Any, workflow_id: int) -> list[tuple[int, int]]:
        """(parent, child) of the workflow's tasks' parents (first attempts' ids)."""
        rows = self._rows(conn, "workflow_edges", {"id": workflow_id})
        return [(int(parent), int(child)) for parent, child in rows]

    def workflow_of_task(self, conn: Any, task_id: int) -> int | None:
        """The id of the workflow the task (any attempt's id) belongs to, or None."""
        rows = self._rows(conn, "workflow_of_task", {"id": task_id})
        return int(rows[0][0]) if rows else None
