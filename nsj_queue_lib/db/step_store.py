"""The statements of durable steps and waits (``nsj_queue_lib/workflow/steps.py``,
``waits.py``), per dialect: ``db/<dialect>/steps.sql``, the same query names everywhere.

Every statement runs on the caller's connection, in its transaction: a handler's
``bd_conn`` (a checkpoint commits with the step's writes) or a client's
(``send_event`` commits with the caller's work).
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.workflow_store import WorkflowStore
from nsj_queue_lib.notify import SCHEDULED_PAYLOAD as SCHEDULED


class StepStore(WorkflowStore):
    """Checkpoints and events of the queue ``queue_table`` on a ``dialect``."""

    queries_file = "steps.sql"
    feature = "durable steps and waits (step, sleep, wait_event, send_event)"

    @classmethod
    def for_store(cls, store: Any, queue_table: str) -> StepStore:
        found = super().for_store(store, queue_table)
        assert isinstance(found, StepStore)
        return found

    # -- checkpoints --

    def result(self, conn: Any, task_id: int, name: str) -> str | None:
        """The JSON text a checkpoint of the task (its first attempt's id) holds, or None."""
        rows = self._rows(conn, "step_result", {"task": task_id, "name": name})
        return None if not rows else str(rows[0][0])

    def count_prefixed(self, conn: Any, task_id: int, prefix: str) -> int:
        rows = self._rows(conn, "count_prefixed", {"task": task_id, "prefix": prefix})
        return int(rows[0][0])

    def owns(self, conn: Any, attempt_id: int) -> bool:
        """Whether the attempt is still 'processando', its row locked until the caller's
        commit (the fence of a checkpoint's commit)."""
        rows = self._rows(conn, "own_attempt", {"id": attempt_id})
        return bool(rows) and rows[0][0] == "processando"

    def save(
        self,
        conn: Any,
        task_id: int,
        name: str,
        result: str,
        attempt_id: int,
        waiting_for: str | None = None,
    ) -> None:
        params = {
            "task": task_id,
            "name": name,
            "result": result,
            "attempt": attempt_id,
            "waiting_for": waiting_for,
        }
        self._run(conn, "save_step", params)

    # -- durable waits --

    def now(self, conn: Any) -> float:
        """The database's clock, in seconds since the epoch (every worker reads the same)."""
        return float(self._rows(conn, "now_epoch", {})[0][0])

    def suspend(self, conn: Any, attempt_id: int, until: float, mensagem: str) -> bool:
        """The attempt 'pendente' again, due at ``until`` (epoch seconds); False when it was
        no longer 'processando'."""
        params = {"id": attempt_id, "until": until, "mensagem": mensagem}
        suspended = self._run(conn, "suspend", params) == 1
        if suspended and self.dialect == "postgres":
            # The listening workers re-plan their next wake-up at the commit, as for a task
            # inserted to run later (trigger.sql); elsewhere they poll.
            self._rows(conn, "notify_ready", {"channel": self.channel, "payload": SCHEDULED})
        return suspended

    def latest_attempt(self, conn: Any, task_id: int) -> tuple[int, int, str] | None:
        """(latest attempt's id, first attempt's id, its status) of the task ``task_id``
        belongs to, locked until the caller's commit; None for an unknown id."""
        if self.dialect == "mysql":
            found = self._locked_latest(conn, task_id, share=False)
            rows = [] if found is None else [(found["id"], found["id_inicial"], found["status"])]
        else:
            rows = self._rows(conn, "latest_attempt", {"id": task_id})
        if not rows:
            return None
        latest, first, status = rows[0]
        return int(latest), int(first), str(status)

    def add_event(self, conn: Any, task_id: int, name: str, payload: str | None) -> None:
        self._run(conn, "add_event", {"task": task_id, "name": name, "payload": payload})

    def nth_event(self, conn: Any, task_id: int, name: str, n: int) -> tuple[str | None] | None:
        """The task's ``n``-th event named ``name`` (0 first) as a 1-tuple of its payload's
        JSON text (None: no payload), or None when it has not arrived."""
        rows = self._rows(conn, "nth_event", {"task": task_id, "name": name, "n": n})
        return None if not rows else (None if rows[0][0] is None else str(rows[0][0]),)

    def wake_waiting(self, conn: Any, attempt_id: int, task_id: int, name: str) -> bool:
        """The attempt, 'pendente' waiting for ``name``, is due now; whether it was."""
        params = {"id": attempt_id, "task": task_id, "name": name}
        woken = self._run(conn, "wake_waiting", params) > 0
        if woken and self.dialect == "postgres":
            self._rows(conn, "notify_ready", {"channel": self.channel, "payload": ""})
        return woken
