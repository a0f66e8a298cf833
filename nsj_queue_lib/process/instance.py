"""``current_task().process``: what a handler sees of, and does to, its task's process.

Everything here writes on the handler's ``bd_conn``, inside its task's transaction:
events, timers and the removal date commit with the task's success and vanish with
its failure, as its ``state``, ``status`` and ``detail`` do (saved by ``running.py``
when the handler returns).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nsj_queue_lib.process.ids import TIMER, json_text

if TYPE_CHECKING:
    from nsj_queue_lib.db.process_store import ProcessStore

# The client (nsj_queue_lib.queue_client.QueueClient, which calls in here): not imported,
# not even for annotations, so that the two modules form no import cycle.
QueueClient = Any

EVENT_TYPE_LIMIT = 100
STATUS_LIMIT = 100
# A timer or a removal further away than this is a mistake (about 100 years).
MAX_DELAY_S = 100 * 365 * 86400.0


class ProcessContext:
    """The process of the running task: ``id``, ``kind`` ('start', 'call', 'repair',
    'timer'), ``state`` (a dict the handler may change or replace), ``status`` and
    ``detail`` (set by the handler), and ``emit``, ``set_timer``, ``remove_after``."""

    def __init__(
        self,
        client: Callable[[], QueueClient],
        conn: Any,
        store: ProcessStore,
        process_id: str,
        task_id: int,
        loaded: dict[str, Any],
        state: dict[str, Any],
    ):
        self._client = client  # the handler's QueueClient, built when first asked for
        self._store = store
        self._conn = conn
        self.id = process_id
        self.task_id = task_id  # the running task's first attempt's id
        self.kind: str = loaded["kind"]
        self.processo: str = loaded["processo"]  # the processo that started the process
        self.state = state
        self.status: str | None = loaded["status"]
        self.detail: str | None = loaded["detail"]
        self.corrupted_by: int | None = loaded["corrupted_by"]
        self._timer_task_id: int | None = loaded["timer_task_id"]
        # As read, to tell whether the task changed anything (running.py writes nothing then).
        self.loaded_state: str = loaded["state"]
        self.loaded_status: str | None = loaded["status"]
        self.loaded_detail: str | None = loaded["detail"]
        self.timer_task_id = self._timer_task_id  # the pending timer when the task started

    def written_form(self) -> tuple[str, str | None, str | None]:
        """(state as JSON text, status, detail) as they are written; ``TypeError`` or
        ``ValueError`` naming what the handler left wrong."""
        if not isinstance(self.state, dict):
            raise TypeError(
                f"process.state must be a dict (a JSON object), got {type(self.state).__name__}"
            )
        for name, value in (("status", self.status), ("detail", self.detail)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"process.{name} must be a str or None, got {type(value).__name__}")
        if self.status is not None and len(self.status) > STATUS_LIMIT:
            raise ValueError(f"process.status is longer than {STATUS_LIMIT} characters")
        return json_text(self.state, "process.state"), self.status, self.detail

    def save_now(self) -> None:
        """Write state, status and detail in the handler's open transaction, which a durable
        step or wait is about to commit: they are kept with what it keeps."""
        state, status, detail = self.written_form()
        self._store.save(self._conn, self.id, self.task_id, state, status, detail, False, None)
        self.loaded_state, self.loaded_status, self.loaded_detail = state, status, detail

    def emit(self, event_type: str, payload: Any = None) -> None:
        """Append an event (``payload``: a JSON value) to the process's history."""
        if not isinstance(event_type, str) or not event_type.strip():
            raise ValueError("event_type must be a non-empty string")
        if len(event_type) > EVENT_TYPE_LIMIT:
            raise ValueError(f"event_type is longer than {EVENT_TYPE_LIMIT} characters")
        text = None if payload is None else json_text(payload, "an event's payload")
        self._store.emit(self._conn, self.id, self.task_id, event_type, text)

    def set_timer(self, seconds: float, processo: str, payload: Any = None) -> int:
        """Run a task of ``processo`` for this process in ``seconds``; its earlier pending
        timer is cancelled (a process has one pending timer). Returns the timer's task id."""
        delay = _delay("seconds", seconds)
        previous = self._timer_task_id
        if previous is not None and previous != self.task_id:
            self._client().cancel_task(previous)  # 'pendente' only; one running ends as it will
        due = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=delay)
        from nsj_queue_lib.process.client import insert_process_task

        task_id = insert_process_task(
            self._client(), self.id, TIMER, processo, payload, {"data_hora": due}
        )
        self._store.set_timer(self._conn, self.id, task_id)
        self._timer_task_id = task_id
        return task_id

    def remove_after(self, seconds: float) -> None:
        """The process and its history are deleted ``seconds`` from now (by the purge
        service); its unfinished tasks are cancelled then."""
        self._store.remove_after(self._conn, self.id, _delay("seconds", seconds))


def _delay(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if not 0 <= value <= MAX_DELAY_S:
        raise ValueError(f"{name} must be between 0 and {MAX_DELAY_S:g}, got {value!r}")
    return float(value)
