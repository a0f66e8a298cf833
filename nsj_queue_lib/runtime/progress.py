"""Progress writer: a running task's reported progress, written outside its transaction.

``current_task().report_progress()`` only records the value in the task's
context; this writer stores the last value of every running task on a pooled
connection of its own (autocommit, never the handler's), when the lifecycle
thread ticks (a few times per second at most, however often the handler
reports) and once more right before the task completes. Rolling back the
handler's work never erases it; a failed write is logged and tried again.

Taking a value and writing it happen under one lock: otherwise a tick that took
step 2 could write it after the completing handler wrote step 3, and the task
would end showing step 2.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from nsj_queue_lib.context import Progress, TaskContext
from nsj_queue_lib.db.driver import ConnectionPool
from nsj_queue_lib.db.queue_store import WorkerStore
from nsj_queue_lib.log import get_logger

logger = get_logger("progress")

# How long a completing handler waits for a tick's progress write under way.
TICK_WAIT_SECONDS = 5.0


class ProgressWriter:
    def __init__(self, store: WorkerStore, pool: ConnectionPool, queue_name: str):
        self.store = store
        self.pool = pool
        self.queue_name = queue_name
        self.writes = 0  # progress rows written since the start
        self._in_order = threading.Lock()

    def flush(self, contexts: Iterable[TaskContext]) -> None:
        """Write the progress the given tasks reported since their last write."""
        with self._in_order:
            pending: list[tuple[TaskContext, Progress]] = []
            for context in contexts:
                progress = context.take_unwritten_progress()
                if progress is not None:
                    pending.append((context, progress))
            if pending:
                self._write(pending)

    def flush_one(self, context: TaskContext) -> None:
        """``flush([context])``, as each handler returns (most reported nothing)."""
        if context.progress is None:
            return  # never reported: no write of it can be under way
        # Bounded: a tick's write stuck on the database must not hold the task's end.
        if not self._in_order.acquire(timeout=TICK_WAIT_SECONDS):
            logger.warning(
                "queue=%s task=%s: a progress write still runs after %.0f s; the task's last "
                "progress is not written",
                self.queue_name,
                context.id,
                TICK_WAIT_SECONDS,
            )
            return
        try:
            progress = context.take_unwritten_progress()
            if progress is not None:
                self._write([(context, progress)])
        finally:
            self._in_order.release()

    def _write(self, pending: list[tuple[TaskContext, Progress]]) -> None:
        try:
            with self.pool.connection() as conn:
                for context, progress in pending:
                    self.store.report_progress(
                        conn, context.id, progress.done, progress.total, progress.message
                    )
                    self.writes += 1
        except Exception as exc:  # noqa: BLE001 - progress is best effort: written next round
            for context, _ in pending:
                context.progress_not_written()
            logger.warning("queue=%s: writing task progress failed (%s)", self.queue_name, exc)
