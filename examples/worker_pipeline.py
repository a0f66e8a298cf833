"""Pipelines: handlers that are generators, run step by step.

Each ``yield`` is a checkpoint: the worker records the progress the value
carries (``(done, total)``, ``(done, total, message)``, a count or a message;
``QueueClient.get_task`` shows it while the task runs), checks the timeout and
raises ``TaskCancelled`` there once ``cancel_task`` was called. The whole
pipeline commits once, with the task: a failed, cancelled or killed pipeline
leaves nothing of its steps. ``load_customers`` is a sync generator whose
``return`` value is the task's ``mensagem``; ``refresh_report`` an async one,
run on the worker's event loop, whose last message is the ``mensagem``::

    DB_HOST=localhost DB_BASE=app DB_USER=app QUEUE_NAME=etl QUEUE_TABLE=public.etl \\
    python examples/worker_pipeline.py

Without a database, on ``nsj_queue_lib.testing.InMemoryQueue``::

    python examples/worker_pipeline.py --in-memory
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

from nsj_queue_lib import QueueClient, Task, TaskCancelled, WorkerBase


class Etl(WorkerBase):
    @Task("load_customers", max_retry=3, timeout_s=600)
    def load_customers(self, payload: str, tarefa: dict[str, Any], bd_conn: Any) -> Iterator[Any]:
        batches = json.loads(payload)["batches"]
        try:
            for done, batch in enumerate(batches, start=1):
                # The batch's writes go on bd_conn, in the task's transaction, e.g.
                #     bd_conn.cursor().executemany("INSERT INTO customer ...", rows)
                yield (done, len(batches), f"batch {batch} loaded")
        except TaskCancelled:
            print(f"task {tarefa['id']}: cancelled, nothing of it is committed", file=sys.stderr)
            raise
        # Enqueued in the same transaction: it exists only if every batch was loaded.
        QueueClient(bd_conn, self.table).insert_task(
            "etl", "report", "refresh_report", tarefa["chave_externa"], {"after": tarefa["id"]}
        )
        return f"{len(batches)} batches loaded"

    @Task("refresh_report")
    async def refresh_report(
        self, payload: str, tarefa: dict[str, Any], bd_conn: Any
    ) -> AsyncIterator[str]:
        for step in ("extract", "transform", "load"):
            await asyncio.sleep(0.01)  # stands for awaited I/O
            yield f"report: {step} done"  # the last one is the task's mensagem

    @property
    def table(self) -> str:
        return self._settings.queue_table if self._settings else "public.etl"


def demo_in_memory() -> list[dict[str, Any]]:
    """A load of three batches and the report it enqueues, on an in-memory queue; its rows."""
    from nsj_queue_lib.testing import InMemoryQueue

    queue = InMemoryQueue()
    client = QueueClient(queue.connection(), "public.etl")
    client.insert_task("app", "etl", "load_customers", "2026-01", {"batches": [1, 2, 3]})
    queue.run(Etl())
    return queue.tasks()


if __name__ == "__main__":
    if "--in-memory" in sys.argv:
        for row in demo_in_memory():
            print(row["processo"], row["status"], row["mensagem"])
    else:
        Etl().run()
