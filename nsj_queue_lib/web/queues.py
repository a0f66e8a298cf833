"""What the API and the console do to a queue, each call in its own transaction.

Writes go through ``QueueClient`` (its checks, its cancel and retry rules);
reads through the queue's inspection store (``nsjq``'s queries). Results are
plain JSON-ready dicts: times as ISO 8601 strings in UTC.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.db.inspection import RECENT_BUCKET, RECENT_WINDOW, TaskFilter
from nsj_queue_lib.db.queue_store import InspectionStore
from nsj_queue_lib.exceptions import NotFoundError
from nsj_queue_lib.queue_client import QueueClient
from nsj_queue_lib.web.connections import Connections

BUCKETS = RECENT_WINDOW // RECENT_BUCKET
FAILED = (model.FALHA, model.FALHA_PROCESSANDO)


class UnknownQueue(LookupError):
    pass


@dataclasses.dataclass(frozen=True)
class Page:
    tasks: list[dict[str, Any]]
    next_cursor: int | None  # the ``before_id`` of the next page, None on the last one


class Queue:
    """One queue table of the database the server serves."""

    def __init__(self, table: str, connections: Connections) -> None:
        self.table = table
        self._connections = connections
        self._inspection: InspectionStore = connections.driver.new_inspection_store(table)

    def enqueue(self, fields: Mapping[str, Any]) -> int:
        """``QueueClient.insert_task`` with ``fields`` (its arguments by name)."""
        with self._connections.transaction() as conn:
            return QueueClient(conn, self.table).insert_task(**fields)

    def cancel(self, task_id: int) -> str:
        """``QueueClient.cancel_task``; raises ``NotFoundError``."""
        with self._connections.transaction() as conn:
            return QueueClient(conn, self.table).cancel_task(task_id)

    def retry(self, task_id: int) -> int:
        """``QueueClient.retry_task``; raises ``NotFoundError``, ``ValueError``."""
        with self._connections.transaction() as conn:
            return QueueClient(conn, self.table).retry_task(task_id)

    def task(self, task_id: int) -> dict[str, Any]:
        """The task (``get_task``'s view), its attempts and its payload; ``NotFoundError``."""
        with self._connections.transaction() as conn:
            view = QueueClient(conn, self.table).get_task(task_id)
            if view is None:
                raise NotFoundError(f"task {task_id} not found in {self.table}")
            # Only an exhausted task has a dead letter, which costs a scan to find.
            chain = self._inspection.task_attempts(conn, task_id)
            if chain and chain[-1]["estouro_tentativas"]:
                chain = self._inspection.task_chain(conn, task_id)
        payload = next((a.pop("payload") for a in chain if a.get("payload") is not None), None)
        for attempt in chain:
            attempt.pop("payload", None)
        return dict(
            view,
            queue=self.table,
            payload=decoded_payload(payload),
            attempts=[json_ready(a) for a in chain],
        )

    def tasks(self, filters: TaskFilter, limit: int) -> Page:
        """A page of tasks, newest first; the cursor is the last id shown."""
        with self._connections.transaction() as conn:
            rows = self._inspection.list_tasks(conn, filters, limit + 1, 0)
        more = len(rows) > limit
        rows = rows[:limit]
        cursor = int(rows[-1]["id"]) if more and rows else None
        return Page([json_ready(r) for r in rows], cursor)

    def stats(self) -> dict[str, Any]:
        """Tasks with work ahead per status, the oldest ready one's age, and the settled
        attempts of the last hour per status and per 5 minutes (oldest bucket first)."""
        with self._connections.transaction() as conn:
            depth = self._inspection.depth(conn)
            recent = self._inspection.recent(conn)
        waiting = dict.fromkeys(model.ACTIVE_STATUSES, 0)
        oldest: float | None = None
        for row in depth:
            waiting[row["status"]] = waiting.get(row["status"], 0) + row["tasks"]
            if row["oldest_ready_seconds"] is not None:
                oldest = max(oldest or 0.0, row["oldest_ready_seconds"])
        settled = {s: 0 for s in model.STATUSES if s not in model.ACTIVE_STATUSES}
        series = [
            {"minutes_ago": (BUCKETS - i) * RECENT_BUCKET // 60, "done": 0, "failed": 0}
            for i in range(BUCKETS)
        ]
        for row in recent:
            if not 0 <= row["bucket"] < BUCKETS:
                continue  # due in the future, or at the window's very edge
            settled[row["status"]] = settled.get(row["status"], 0) + row["tasks"]
            point = series[BUCKETS - 1 - row["bucket"]]
            point["failed" if row["status"] in FAILED else "done"] += row["tasks"]
        return {
            "queue": self.table,
            "waiting": waiting,
            "oldest_ready_seconds": oldest,
            "last_hour": settled,
            "series": series,
            "bucket_seconds": RECENT_BUCKET,
        }


class Queues:
    """The queues the server serves, by table name; the first is the default."""

    def __init__(self, tables: tuple[str, ...], connections: Connections) -> None:
        self.connections = connections
        self._queues = {table: Queue(table, connections) for table in tables}
        self.default = tables[0]

    @property
    def names(self) -> list[str]:
        return list(self._queues)

    def get(self, name: str | None) -> Queue:
        queue = self._queues.get(name or self.default)
        if queue is None:
            raise UnknownQueue(f"unknown queue {name!r}; this server has {', '.join(self.names)}")
        return queue


def decoded_payload(text: str | None) -> Any:
    """The stored payload as JSON, or as its text when it is not JSON."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def json_ready(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row with its times as ISO 8601 strings."""
    return {k: v.isoformat() if isinstance(v, datetime.datetime) else v for k, v in row.items()}
