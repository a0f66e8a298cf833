"""``remove_after``: the purge service deletes a process and its history when due.

Each run of the purge service removes the processes whose ``remove_at`` passed, in
bounded rounds: their unfinished tasks are cancelled (a timer never fires for a
process that is gone), then their events, task list and row are deleted. A process
whose task is running (its row locked by that task) waits for a later run. The
tasks' own rows are history like any other: the queue's purge deletes them by age.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.process_store import ProcessStore
from nsj_queue_lib.exceptions import WorkflowUnsupported

REMOVED = "cancelled: its process was removed (remove_after)"


def remove_due(queue_store: Any, conn: Any, limit: int) -> int:
    """One round, in the caller's transaction: how many processes were removed. 0 where the
    queue has no process tables (SingleStore, the in-memory queue); -1 where a statement
    failed on a missing table (a queue db_gen --upgrade has not reached: the caller rolls
    the transaction back)."""
    queue_table = getattr(queue_store, "queue_table", None)
    if not isinstance(queue_table, str):
        return 0
    try:
        store = ProcessStore.for_store(queue_store, queue_table)
    except WorkflowUnsupported:
        return 0
    try:
        due = store.due_removals(conn, limit)
        for process_id in due:
            store.cancel_unfinished(conn, process_id, REMOVED)
            store.delete(conn, process_id)
    except WorkflowUnsupported:
        return -1
    return len(due)
