"""What the process tasks of one commit group share: one read, one write.

A process's task costs the worker a read of its process (locked) before its handler
and a write of what the handler left after it: two statements per task, where a commit
group's plain task costs a share of one claim and one settle. In a group
(PostgreSQL's, runtime/drain_group.py), the first process task reads the processes of
every process task the group claimed, in one statement, and each success's write waits
in ``saves`` for the group's commit, which sends them all in one statement in the same
round trip as the settle (db/postgres/session.py): the write commits exactly when the
task's success does, and vanishes with it.

The rows read ahead stay right until their tasks run: only a task of a process
changes it, and a process's tasks run one at a time (this group holds them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nsj_queue_lib.db.process_store import ProcessStore
from nsj_queue_lib.process.ids import process_id_of

# One success's write: process_id, task_id (first attempt), state, status, detail, repair,
# response (the columns of processes.sql's save_processes, in order).
ProcessSave = tuple[str, int, str, "str | None", "str | None", bool, "str | None"]


class ProcessBatch:
    def __init__(self, peers: Callable[[], list[Mapping[str, Any]]]):
        self._peers = peers  # the rows of the group's tasks not started yet
        self._loaded: dict[int, dict[str, Any] | None] = {}  # by first attempt's id
        # By attempt id: the writes of the group's successes since its last commit.
        self.saves: dict[int, ProcessSave] = {}
        # Seconds of reads done for the group's other tasks since ``take_load_seconds``.
        self._load_seconds = 0.0

    def load(self, store: Any, conn: Any, task_id: int) -> dict[str, Any] | None:
        """``store.load_for_task`` for this task (its first attempt's id), read with the
        group's other process tasks' the first time."""
        if task_id not in self._loaded:
            wanted = [task_id]
            for row in self._peers():
                first = int(row.get("id_inicial") or row["id"])
                if process_id_of(row) is not None and first not in self._loaded:
                    wanted.append(first)
            started = time.monotonic()
            found = store.load_for_tasks(conn, wanted)
            self._load_seconds += time.monotonic() - started
            for first in wanted:
                self._loaded[first] = found.get(first)
        return self._loaded.pop(task_id)

    def take_load_seconds(self) -> float:
        """The time the last handler spent reading the group's processes, which is the
        group's cost, not its handler's: counted in the handlers' pace, it made the next
        handler of the processo look as slow as the whole read, and groups closed early,
        giving back their unstarted tasks (group_pace.py)."""
        seconds, self._load_seconds = self._load_seconds, 0.0
        return seconds

    def take_saves(self, attempt_ids: list[int]) -> list[ProcessSave]:
        """The writes of these successes (the group's commit sends them), in their order."""
        return [self.saves.pop(i) for i in attempt_ids if i in self.saves]


def write_saves(store: Any, conn: Any, saves: Sequence[Sequence[Any]]) -> None:
    """Process writes a commit group deferred (process/batch.py's ProcessSave tuples), sent
    now, one statement each, in the caller's transaction: where the group's commit that was
    to carry them never came (db/task_session.py's settle_lost)."""
    pstore = ProcessStore.for_store(store, store.queue_table)
    for save in saves:
        pstore.save(conn, *save)
