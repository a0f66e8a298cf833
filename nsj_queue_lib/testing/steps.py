"""Durable steps and waits in an ``InMemoryQueue``: its checkpoints and events in memory.

``MemorySteps`` answers the calls ``workflow/steps.py`` and ``workflow/waits.py`` make
of ``db/step_store.py``'s ``StepStore`` (the connection argument is ignored), on the
rows of a ``MemoryStore`` and its clock; ``MemoryCommits`` is a handler's commits
(``runtime/handler_commits.py``): a step keeps the rows the handler staged so far,
as its commit would. A sleeping task is 'pendente' again, due when its sleep ends;
``InMemoryQueue.run`` moves its clock there (``advance_time``).
"""

from __future__ import annotations

import datetime
from typing import Any

from nsj_queue_lib import model

# testing/store.py's row (not imported: its MemoryStore holds a MemorySteps).
Row = dict[str, Any]


class MemorySteps:
    def __init__(self, store: Any) -> None:  # its MemoryStore
        self.store = store
        # (task's first attempt id, name) -> (result JSON text, event waited for or None)
        self.checkpoints: dict[tuple[int, str], tuple[str, str | None]] = {}
        self.events: list[tuple[int, str, str | None]] = []  # (task, name, payload JSON)

    # -- checkpoints --

    def result(self, conn: Any, task_id: int, name: str) -> str | None:
        found = self.checkpoints.get((task_id, name))
        return None if found is None else found[0]

    def count_prefixed(self, conn: Any, task_id: int, prefix: str) -> int:
        return sum(1 for t, n in self.checkpoints if t == task_id and n.startswith(prefix))

    def owns(self, conn: Any, attempt_id: int) -> bool:
        row = self.store.rows.get(attempt_id)
        return row is not None and row["status"] == model.PROCESSANDO

    def save(
        self,
        conn: Any,
        task_id: int,
        name: str,
        result: str,
        attempt_id: int,
        waiting_for: str | None = None,
    ) -> None:
        self.checkpoints[(task_id, name)] = (result, waiting_for)

    # -- durable waits --

    def now(self, conn: Any) -> float:
        return self.store.now.timestamp()

    def suspend(self, conn: Any, attempt_id: int, until: float, mensagem: str) -> bool:
        row = self.store.rows.get(attempt_id)
        if row is None or row["status"] != model.PROCESSANDO:
            return False
        due = datetime.datetime.fromtimestamp(until, datetime.timezone.utc)
        row.update(status=model.PENDENTE, data_hora=due, mensagem=mensagem)
        return True

    def latest_attempt(self, conn: Any, task_id: int) -> tuple[int, int, str] | None:
        row = self.store.rows.get(task_id)
        if row is None:
            return None
        first = row["id_inicial"] or row["id"]
        latest = max(
            (r for r in self.store.rows.values() if (r["id_inicial"] or r["id"]) == first),
            key=lambda r: r["id"],
        )
        return int(latest["id"]), int(first), str(latest["status"])

    def add_event(self, conn: Any, task_id: int, name: str, payload: str | None) -> None:
        self.events.append((task_id, name, payload))

    def nth_event(self, conn: Any, task_id: int, name: str, n: int) -> tuple[str | None] | None:
        found = [p for t, e, p in self.events if t == task_id and e == name]
        return (found[n],) if n < len(found) else None

    def wake_waiting(self, conn: Any, attempt_id: int, task_id: int, name: str) -> bool:
        row: Row | None = self.store.rows.get(attempt_id)
        waiting = any(t == task_id and w == name for (t, _), (_, w) in self.checkpoints.items())
        if row is None or row["status"] != model.PENDENTE or not waiting:
            return False
        row["data_hora"] = self.store.now
        return True


class MemoryCommits:
    """A handler's commits in an ``InMemoryQueue``: the rows it staged are kept."""

    def __init__(self, steps: MemorySteps, staged: list[Row]) -> None:
        self.steps = steps
        self.staged = staged

    def prepare(self) -> None:
        """Nothing is held unwritten in memory."""

    def keep(self) -> None:
        self.steps.store.keep(self.staged)
        self.staged.clear()

    def release(self) -> None:
        self.keep()  # the row is 'pendente' already (MemorySteps.suspend)
