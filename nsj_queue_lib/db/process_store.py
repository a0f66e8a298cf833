"""The statements of process instances (``nsj_queue_lib/process/``), per dialect:
``db/<dialect>/processes.sql``, the same query names everywhere.

Every statement runs on the caller's connection, in its transaction: a client's
(``start_process`` and ``call_process`` commit with the caller's work) or a handler's
``bd_conn`` (the process's state, events and timers commit with the task's success).
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.dialect import (
    process_events_table_name,
    process_tasks_table_name,
    processes_table_name,
)
from nsj_queue_lib.db.workflow_store import WorkflowStore

PROCESS_COLUMNS = (
    "process_id",
    "processo",
    "status",
    "detail",
    "state",
    "corrupted_by",
    "timer_task_id",
    "remove_at",
    "created_at",
    "updated_at",
)
# What a task of a process starts with (load_for_task), before its kind.
LOADED_COLUMNS = (
    "processo",
    "status",
    "detail",
    "state",
    "corrupted_by",
    "timer_task_id",
    "remove_at",
)
EVENT_COLUMNS = ("id", "task_id", "event_type", "payload", "created_at")
TASK_COLUMNS = (
    "id",
    "kind",
    "response",
    "created_at",
    "processo",
    "status",
    "mensagem",
    "data_hora",
    "started_at",
    "finished_at",
)


class ProcessStore(WorkflowStore):
    """Process instances of the queue ``queue_table`` on a ``dialect``."""

    queries_file = "processes.sql"
    feature = "process instances (start_process, call_process, process_id=)"

    @staticmethod
    def template_values(queue_table: str) -> dict[str, str]:
        return {
            "queue_table": queue_table,
            "processes_table": processes_table_name(queue_table),
            "process_tasks_table": process_tasks_table_name(queue_table),
            "process_events_table": process_events_table_name(queue_table),
        }

    @classmethod
    def for_store(cls, store: Any, queue_table: str) -> ProcessStore:
        found = super().for_store(store, queue_table)
        assert isinstance(found, ProcessStore)
        return found

    def tables(self) -> tuple[str, ...]:
        return (
            processes_table_name(self.queue_table),
            process_tasks_table_name(self.queue_table),
            process_events_table_name(self.queue_table),
        )

    # -- the client's side --

    def create(self, conn: Any, process_id: str, processo: str) -> bool:
        """The process's row; False when the id exists (nothing written)."""
        params = {"process_id": process_id, "processo": processo}
        if self.dialect == "postgres":
            return bool(self._rows(conn, "create_process", params))
        return self._run(conn, "create_process", params) == 1

    def read(self, conn: Any, process_id: str) -> tuple[int | None] | None:
        """(corrupted_by,) of the process, share-locked until the caller's commit; None for
        an unknown id."""
        rows = self._rows(conn, "read_process", {"process_id": process_id})
        if not rows:
            return None
        return (None if rows[0][0] is None else int(rows[0][0]),)

    def add_task(self, conn: Any, task_id: int, process_id: str, kind: str) -> None:
        self._run(conn, "add_task", {"task_id": task_id, "process_id": process_id, "kind": kind})

    # -- a running task's side --

    def load_for_task(self, conn: Any, process_id: str, task_id: int) -> dict[str, Any] | None:
        """The process, locked until the task's commit, with the task's kind (None when the
        task is not one of the process's); None when the process is gone."""
        rows = self._rows(conn, "load_for_task", {"process_id": process_id, "task_id": task_id})
        if not rows:
            return None
        return dict(zip((*LOADED_COLUMNS, "kind"), rows[0], strict=True))

    def load_for_tasks(self, conn: Any, task_ids: list[int]) -> dict[int, dict[str, Any]]:
        """``load_for_task`` for many tasks at once (their first attempts' ids; PostgreSQL):
        {task id: what it gives}, without the tasks whose process is gone."""
        keys = (*LOADED_COLUMNS, "kind")
        rows = self._rows(conn, "load_for_tasks", {"task_ids": [int(t) for t in task_ids]})
        return {int(row[0]): dict(zip(keys, row[1:], strict=True)) for row in rows}

    def save(
        self,
        conn: Any,
        process_id: str,
        task_id: int,
        state: str,
        status: str | None,
        detail: str | None,
        repair: bool,
        response: str | None,
    ) -> None:
        params = {
            "process_id": process_id,
            "task_id": task_id,
            "state": state,
            "status": status,
            "detail": detail,
            "repair": repair,
            "response": response,
        }
        self._run(conn, "save_process", params)

    def emit(
        self, conn: Any, process_id: str, task_id: int, event_type: str, payload: str | None
    ) -> None:
        params = {
            "process_id": process_id,
            "task_id": task_id,
            "event_type": event_type,
            "payload": payload,
        }
        self._run(conn, "emit", params)

    def set_timer(self, conn: Any, process_id: str, task_id: int) -> None:
        self._run(conn, "set_timer", {"process_id": process_id, "task_id": task_id})

    def remove_after(self, conn: Any, process_id: str, seconds: float) -> None:
        params = {"process_id": process_id, "microseconds": round(seconds * 1_000_000)}
        self._run(conn, "remove_after", params)

    def corrupt(self, conn: Any, attempt_id: int, detail: str) -> int:
        """The process of the task ``attempt_id`` belongs to (if any) marked corrupted by it;
        how many processes changed (0 or 1)."""
        return self._run(conn, "corrupt", {"id": attempt_id, "detail": detail})

    # -- reads --

    def get(self, conn: Any, process_id: str) -> dict[str, Any] | None:
        rows = self._rows(conn, "get_process", {"process_id": process_id})
        return None if not rows else dict(zip(PROCESS_COLUMNS, rows[0], strict=True))

    def recent_events(self, conn: Any, process_id: str, limit: int) -> list[dict[str, Any]]:
        """The process's last ``limit`` events, oldest first."""
        rows = self._rows(conn, "recent_events", {"process_id": process_id, "limit": limit})
        return [dict(zip(EVENT_COLUMNS, row, strict=True)) for row in reversed(rows)]

    def recent_tasks(self, conn: Any, process_id: str, limit: int) -> list[dict[str, Any]]:
        """The process's last ``limit`` tasks (latest attempt's status), oldest first."""
        rows = self._rows(conn, "recent_tasks", {"process_id": process_id, "limit": limit})
        return [dict(zip(TASK_COLUMNS, row, strict=True)) for row in reversed(rows)]

    def task_state(self, conn: Any, task_id: int) -> dict[str, Any] | None:
        """One of the process's tasks (its first attempt's id) as ``recent_tasks`` gives it."""
        rows = self._rows(conn, "task_state", {"task_id": task_id})
        return None if not rows else dict(zip(TASK_COLUMNS, rows[0], strict=True))

    def task_process(self, conn: Any, task_id: int) -> tuple[str, str, str | None] | None:
        """(process_id, kind, response JSON text) of the task ``task_id`` (any attempt's
        id); None when it is no process's task."""
        rows = self._rows(conn, "task_process", {"id": task_id})
        if not rows:
            return None
        process_id, kind, response = rows[0]
        return str(process_id), str(kind), None if response is None else str(response)

    # -- removal (the purge service) --

    def due_removals(self, conn: Any, limit: int) -> list[str]:
        """Up to ``limit`` processes past their ``remove_at``, locked (skipping those a
        running task holds)."""
        return [str(row[0]) for row in self._rows(conn, "due_removals", {"limit": limit})]

    def cancel_unfinished(self, conn: Any, process_id: str, mensagem: str) -> int:
        """The process's tasks that have not started, 'cancelada'; how many."""
        rows = self._rows(conn, "unfinished_tasks", {"process_id": process_id})
        if not rows:
            return 0
        params = {"ids": self._ids([int(row[0]) for row in rows]), "mensagem": mensagem}
        return self._run(conn, "cancel_unfinished", params)

    def delete(self, conn: Any, process_id: str) -> None:
        """The process, its event history and its task list (the tasks' rows stay: the
        queue's own purge deletes them with the rest of the history)."""
        for name in ("delete_events", "delete_tasks", "delete_process"):
            self._run(conn, name, {"process_id": process_id})
