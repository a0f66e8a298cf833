"""``QueueBackend``: Django's task framework on a queue table of nsj_queue_lib.

``enqueue`` writes the task's row with ``QueueClient`` on Django's own connection of
``OPTIONS["DATABASE"]``, in whatever transaction it has open: inside
``transaction.atomic()`` the task exists once that block commits, and never if it rolls
back; outside one, Django's autocommit writes it at once. A worker
(``python manage.py nsjq_worker``, ``worker.py``) runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connections, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from nsj_queue_lib.contrib.django.calls import (
    call_payload,
    parse_result_id,
    queue_priority,
    read_payload,
    result_id,
    run_after,
)
from nsj_queue_lib.contrib.django.compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from nsj_queue_lib.contrib.django.options import QueueOptions, read_options
from nsj_queue_lib.contrib.django.results import task_result
from nsj_queue_lib.db.driver import client_inspection_store
from nsj_queue_lib.model import TEXT_LIMITS
from nsj_queue_lib.queue_client import QueueClient


class QueueBackend(BaseTaskBackend):
    supports_defer = True  # run_after is the task's data_hora: no worker claims it before
    supports_async_task = True  # the worker runs a coroutine function to its end
    supports_get_result = True  # from the queue table, in any process
    supports_priority = True  # the queue claims higher prioridade first

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self.queue_options: QueueOptions = read_options(alias, self.queues, self.options)

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        self.table_of(task.queue_name)
        processo = self.queue_options.processo or task.module_path
        if len(processo) > TEXT_LIMITS["processo"]:
            raise InvalidTask(
                f"the task's path is its processo, at most {TEXT_LIMITS['processo']} characters"
            )

    def enqueue(self, task: Task, args: Sequence[Any], kwargs: Mapping[str, Any]) -> TaskResult:
        self.validate_task(task)
        payload = call_payload(task, args, kwargs)
        options = self.queue_options
        conn = self._connection()
        client = QueueClient(conn, self.table_of(task.queue_name), options.subscriber_table)
        # A failed INSERT inside atomic() leaves the transaction to roll back: Django must know.
        with transaction.mark_for_rollback_on_error(using=options.database):
            task_id = client.insert_task(
                origem=options.origem,
                destino=task.queue_name,
                processo=options.processo or task.module_path,
                # NULL (the column is nullable; the client takes None): no external key.
                chave_externa=None,  # type: ignore[arg-type]
                payload=payload,
                data_hora=task.run_after,
                prioridade=queue_priority(task.priority),
            )
        result = TaskResult(
            task=task,
            id=result_id(task.queue_name, task_id),
            status=TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The task's state as its latest attempt has it, read on Django's connection (in
        its transaction, if one is open)."""
        parsed = parse_result_id(result_id)
        table = None if parsed is None else self.queue_options.table_for(parsed[0])
        if parsed is None or table is None:
            raise TaskResultDoesNotExist(result_id)
        queue_name, task_id = parsed
        conn = self._connection()
        attempts = client_inspection_store(conn, table).task_attempts(conn, task_id)
        call = read_payload(attempts[0].get("payload")) if attempts else None
        if call is None or attempts[0]["id"] != task_id or call.get("queue_name") != queue_name:
            raise TaskResultDoesNotExist(result_id)
        return task_result(self.task_of(call), result_id, call, attempts)

    def task_of(self, call: Mapping[str, Any]) -> Task:
        """The ``Task`` a call was made of, as it was enqueued (priority, queue, run_after)."""
        found = import_string(call["task"])
        if not isinstance(found, Task):
            raise InvalidTask(f"{call['task']} is not a task (decorate it with @task)")
        return found.using(
            priority=call["priority"],
            queue_name=call["queue_name"],
            run_after=run_after(call),
            backend=self.alias,
        )

    def table_of(self, queue_name: str) -> str:
        """The queue table of a Django queue name (``InvalidTask`` when none)."""
        table = self.queue_options.table_for(queue_name)
        if table is None:
            raise InvalidTask(f"Queue '{queue_name}' has no table in OPTIONS.")
        return table

    def _connection(self) -> Any:
        """Django's DB-API connection, in the transaction it has open."""
        wrapper = connections[self.queue_options.database]
        wrapper.ensure_connection()
        wrapper.validate_no_broken_transaction()
        return wrapper.connection
