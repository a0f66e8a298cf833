"""How a worker learns that one of its running tasks was cancelled.

``QueueClient.cancel_task`` records the request on the running attempt's row.
On PostgreSQL it also sends ``cancel:<id>`` on the queue's channel in the same
transaction; the dispatcher receives it (from LISTEN, or relayed by the socket
server in client/server mode) and hands the ids to ``notified``. In
client/server mode on the other databases, the socket server finds the
requests (one query a second for all its workers) and pushes the same
``cancel:<id>``. Without either (MySQL on its own), and as a safety net for a
notification lost with a connection, ``poll`` asks the database which of this
worker's running attempts have a request: one query per worker, every
CANCEL_POLL_SECONDS where nothing is pushed (every CANCEL_SAFETY_POLL_SECONDS
where it is), and none while idle.
"""

from __future__ import annotations

from collections.abc import Iterable

from nsj_queue_lib.context import CANCEL_REQUESTED
from nsj_queue_lib.db.driver import ConnectionPool
from nsj_queue_lib.db.queue_store import WorkerStore
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.runtime.executor import TaskExecutor

logger = get_logger("cancel")

CANCEL_POLL_SECONDS = 1.0
CANCEL_SAFETY_POLL_SECONDS = 5.0


class CancelWatcher:
    def __init__(
        self,
        store: WorkerStore,
        pool: ConnectionPool,
        executor: TaskExecutor,
        queue_name: str,
        notified: bool,
    ):
        self.store = store
        self.pool = pool
        self.executor = executor
        self.queue_name = queue_name
        self.poll_seconds = CANCEL_SAFETY_POLL_SECONDS if notified else CANCEL_POLL_SECONDS

    def notified(self, task_ids: Iterable[int]) -> None:
        """Cancel requests announced by notification (ids of attempts of any worker)."""
        for task_id in task_ids:
            self._stop(task_id)

    def poll(self) -> None:
        """Ask the database about this worker's running attempts (nothing when idle)."""
        running = [item.task.id for item in self.executor.running_tasks()]
        if not running:
            return
        try:
            with self.pool.connection() as conn:
                requested = self.store.cancel_requests(conn, running)
        except Exception as exc:  # noqa: BLE001 - polled again on the next round
            logger.warning("queue=%s: polling cancel requests failed (%s)", self.queue_name, exc)
            return
        for task_id in requested:
            self._stop(task_id)

    def _stop(self, task_id: int) -> None:
        if self.executor.request_stop(task_id, CANCEL_REQUESTED):
            logger.info("queue=%s task=%s: cancel requested", self.queue_name, task_id)
