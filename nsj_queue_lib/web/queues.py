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

from nsj_queue_lib.db.inspection import TaskFilter, as_utc
from nsj_queue_lib.db.pause_store import BreakerStore
from nsj_queue_lib.db.queue_store import InspectionStore
from nsj_queue_lib.db.subscriber_breaker_store import subscriber_breakers
from nsj_queue_lib.exceptions import DatabaseError, NotFoundError
from nsj_queue_lib.process.client import process_store
from nsj_queue_lib.queue_client import QueueClient
from nsj_queue_lib.runtime.registry import STALE_SECONDS
from nsj_queue_lib.web.connections import Connections
from nsj_queue_lib.web.overview import queue_stats, worker_rows
from nsj_queue_lib.web.states import state_of
from nsj_queue_lib.workflow.view import workflow_of_task


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

    def wait(self, task_id: int, timeout_s: float) -> dict[str, Any]:
        """``QueueClient.wait_for_task`` (after the enqueue's commit), pushed through the
        workers' socket server where they use one; raises ``TimeoutError``."""
        with self._connections.transaction() as conn:
            return QueueClient(conn, self.table).wait_for_task(
                task_id, timeout_s, server=self._connections.driver.settings
            )

    def cancel(self, task_id: int) -> str:
        """``QueueClient.cancel_task``; raises ``NotFoundError``."""
        with self._connections.transaction() as conn:
            return QueueClient(conn, self.table).cancel_task(task_id)

    def retry(self, task_id: int) -> int:
        """``QueueClient.retry_task``; raises ``NotFoundError``, ``ValueError``."""
        with self._connections.transaction() as conn:
            return QueueClient(conn, self.table).retry_task(task_id)

    def workflow(self, workflow_id: int) -> dict[str, Any]:
        """``QueueClient.get_workflow``, JSON-ready; ``NotFoundError`` for an unknown id,
        ``WorkflowUnsupported`` where the queue has no workflows (SingleStore)."""
        with self._connections.transaction() as conn:
            found = QueueClient(conn, self.table).get_workflow(workflow_id)
        if found is None:
            raise NotFoundError(f"workflow {workflow_id} not found in {self.table}")
        return dict(json_ready(found), queue=self.table)

    def cancel_workflow(self, workflow_id: int) -> dict[int, str]:
        """``QueueClient.cancel_workflow``: {task id: status after}; ``NotFoundError``."""
        with self._connections.transaction() as conn:
            return QueueClient(conn, self.table).cancel_workflow(workflow_id)

    def workflow_of_task(self, task_id: int) -> int | None:
        """The workflow the task belongs to (None: none, or no workflows here)."""
        try:
            with self._connections.transaction() as conn:
                return workflow_of_task(QueueClient(conn, self.table), task_id)
        except DatabaseError:  # WorkflowUnsupported included: a task page still shows
            return None

    def start_process(
        self, process_id: str, processo: str, payload: Any, options: Mapping[str, Any]
    ) -> int:
        """``QueueClient.start_process``; raises ``ProcessExistsError``, ``ValueError``."""
        with self._connections.transaction() as conn:
            return QueueClient(conn, self.table).start_process(
                process_id, processo, payload, **options
            )

    def call_process(
        self,
        process_id: str,
        processo: str,
        payload: Any,
        options: Mapping[str, Any],
        repair: bool = False,
    ) -> int:
        """``QueueClient.call_process`` (``repair_process`` with ``repair``); raises
        ``NotFoundError``, ``ProcessCorruptedError``, ``ValueError``."""
        with self._connections.transaction() as conn:
            client = QueueClient(conn, self.table)
            enqueue = client.repair_process if repair else client.call_process
            return enqueue(process_id, processo, payload, **options)

    def wait_for_call(self, task_id: int, timeout_s: float) -> tuple[dict[str, Any], Any]:
        """``wait_for_task``, then ``call_response``, for a process's task (after its commit):
        (the task's view, the handler's result); raises ``TimeoutError``."""
        with self._connections.transaction() as conn:
            client = QueueClient(conn, self.table)
            task = client.wait_for_task(
                task_id, timeout_s, server=self._connections.driver.settings
            )
            return task, client.call_response(task_id)

    def process(self, process_id: str, events: int = 20, tasks: int = 20) -> dict[str, Any]:
        """``QueueClient.get_process``, JSON-ready; ``NotFoundError`` for an unknown id,
        ``WorkflowUnsupported`` where the queue has no process tables."""
        with self._connections.transaction() as conn:
            found = QueueClient(conn, self.table).get_process(process_id, events, tasks)
        if found is None:
            raise NotFoundError(f"process {process_id!r} not found in {self.table}")
        ready = json_ready(_utc(found))
        for part in ("timers", "events", "tasks"):
            ready[part] = [json_ready(_utc(item)) for item in found[part]]
        return dict(ready, queue=self.table)

    def process_of_task(self, task_id: int) -> tuple[str, str] | None:
        """(process id, kind) of the task's process; None when it belongs to none (or the
        queue has no process tables)."""
        try:
            with self._connections.transaction() as conn:
                found = process_store(QueueClient(conn, self.table)).task_process(conn, task_id)
        except DatabaseError:  # WorkflowUnsupported included: a task page still shows
            return None
        return None if found is None else (found[0], found[1])

    def pause(self, processo: str | None, until: datetime.datetime | None) -> None:
        """``QueueClient.pause``: the whole queue (or ``processo``), across every worker."""
        with self._connections.transaction() as conn:
            QueueClient(conn, self.table).pause(processo, until)

    def resume(self, processo: str | None) -> bool:
        """``QueueClient.resume``; whether there was a pause."""
        with self._connections.transaction() as conn:
            return QueueClient(conn, self.table).resume(processo)

    def paused(self) -> list[dict[str, Any]] | None:
        """``QueueClient.paused``; None where pauses cannot be read (SingleStore, or a
        limits table db_gen --upgrade has not reached). Its own transaction, as
        ``_live_workers``."""
        try:
            with self._connections.transaction() as conn:
                return QueueClient(conn, self.table).paused()
        except (DatabaseError, NotImplementedError):
            return None

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
        attempts = [json_ready(a) for a in chain]
        return dict(
            view,
            **task_states(view, attempts),
            queue=self.table,
            payload=decoded_payload(payload),
            attempts=attempts,
        )

    def tasks(self, filters: TaskFilter, limit: int) -> Page:
        """A page of tasks, newest first; the cursor is the last id shown."""
        with self._connections.transaction() as conn:
            rows = self._inspection.list_tasks(conn, filters, limit + 1, 0)
        more = len(rows) > limit
        rows = rows[:limit]
        cursor = int(rows[-1]["id"]) if more and rows else None
        now = datetime.datetime.now(datetime.timezone.utc)
        return Page([dict(json_ready(r), state=state_of(r, now).name) for r in rows], cursor)

    def stats(self) -> dict[str, Any]:
        """The backlog per status, the oldest ready task's age, the settled attempts of the
        last hour per status and per 5 minutes (oldest bucket first), the same per
        processo, and the live workers (overview.queue_stats)."""
        with self._connections.transaction() as conn:
            depth = self._inspection.depth(conn)
            recent = self._inspection.recent(conn)
            running = self._inspection.running_by_worker(conn)
        workers = worker_rows(self._live_workers(), running)
        return dict(
            queue_stats(self.table, depth, recent, workers),
            paused=self.paused(),
            circuit_breakers=self.breakers(),
            subscriber_circuit_breakers=self.subscriber_breakers(),
        )

    def breakers(self) -> list[dict[str, Any]] | None:
        """The circuit breakers with failures or open; None where they cannot be read."""
        try:
            with self._connections.transaction() as conn:
                return [b.as_dict() for b in BreakerStore(conn, self.table).breakers(conn)]
        except (DatabaseError, NotImplementedError):
            return None

    def subscriber_breakers(self) -> list[dict[str, Any]]:
        """The webhook subscribers' circuit breakers with failures or open ([] where they
        cannot be read)."""
        try:
            with self._connections.transaction() as conn:
                return subscriber_breakers(conn, self.table)
        except DatabaseError:
            return []

    def _live_workers(self) -> list[dict[str, Any]] | None:
        """The workers seen within STALE_SECONDS; None without a workers table (a schema
        before db_gen --upgrade). Its own transaction: on PostgreSQL the missing table's
        error ends the one it happens in."""
        try:
            with self._connections.transaction() as conn:
                return self._inspection.live_workers(conn, STALE_SECONDS)
        except DatabaseError:
            return None


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


def task_states(view: Mapping[str, Any], attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """The task's ``state`` (its latest attempt's), each attempt's (set in place), and its
    dead-letter links: ``dead_letter_of``, the task a dead letter came from (``live_id``),
    and ``dead_letter``, the dead letter of an exhausted task (None when not read)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    for attempt in attempts:
        attempt["state"] = state_of(attempt, now).name
    latest = next((a for a in attempts if a["id"] == view["id"]), None)
    if latest is None:
        return {"state": None, "dead_letter_of": None, "dead_letter": None}
    # Only the view reads the cancel request of the latest attempt.
    state = state_of(dict(latest, cancel_requested=view["cancel_requested"]), now)
    first = view["id_inicial"]
    buried = [a["id"] for a in attempts if a["dead"] and a["live_id"] == first]
    return {
        "state": state.name,
        "dead_letter_of": latest["live_id"] if latest["dead"] else None,
        "dead_letter": min(buried, default=None),
    }


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


def _utc(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row whose naive times (MySQL/MariaDB's sessions read them in UTC) carry UTC."""
    return {k: as_utc(v) if isinstance(v, datetime.datetime) else v for k, v in row.items()}
