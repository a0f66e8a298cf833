"""Async handlers, and two queues served by one process.

``Quotes`` has an ``async def`` handler: it runs on the worker's event loop,
so with ``QUEUE_CONCURRENCY=100`` one process keeps 100 tasks awaiting I/O at
once, each in its own transaction (``QUEUE_POOL_SIZE`` connections, default
QUEUE_CONCURRENCY). ``Mail`` is an ordinary sync worker on a second queue.
``run_workers`` runs both in this process, one pool for their database; SIGTERM
stops both, ``NOTIFY <queue>, 'HALT'`` only that queue's part::

    DB_HOST=localhost DB_BASE=app DB_USER=app \\
    QUEUE_NAME=quotes QUEUE_TABLE=public.quotes QUEUE_CONCURRENCY=100 QUEUE_POOL_SIZE=60 \\
    MAIL_QUEUE_NAME=mail MAIL_QUEUE_TABLE=public.mail \\
    python examples/worker_async.py

Without a database, on ``nsj_queue_lib.testing.InMemoryQueue``::

    python examples/worker_async.py --in-memory
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from nsj_queue_lib import QueueClient, Settings, Task, WorkerBase, run_workers


class Quotes(WorkerBase):
    @Task("fetch_quote", max_retry=5, retry_backoff="exponential", retry_base_s=1)
    async def fetch_quote(self, payload: str, tarefa: dict[str, Any], bd_conn: Any) -> str:
        symbol = json.loads(payload)["symbol"]
        await asyncio.sleep(0.05)  # stands for an HTTP call (httpx.AsyncClient, aiohttp, ...)
        # On PostgreSQL bd_conn is a psycopg AsyncConnection inside the task's transaction:
        #     await bd_conn.execute("INSERT INTO quotes_seen (symbol) VALUES (%s)", (symbol,))
        return f"{symbol}: 42.0"

    def execute(self, payload: str, tarefa: dict[str, Any], bd_conn: Any) -> str:
        return f"{tarefa['processo']}: nothing to do"  # sync and async handlers mix freely


class Mail(WorkerBase):
    def execute(self, payload: str, tarefa: dict[str, Any], bd_conn: Any) -> str:
        return f"mail sent to {json.loads(payload)['to']}"


def demo_in_memory() -> list[dict[str, Any]]:
    """The quotes of two symbols fetched on an in-memory queue; its rows."""
    from nsj_queue_lib.testing import InMemoryQueue

    queue = InMemoryQueue()
    client = QueueClient(queue.connection(), "public.quotes")
    for symbol in ("PETR4", "VALE3"):
        client.insert_task("app", "quotes", "fetch_quote", symbol, {"symbol": symbol})
    queue.run(Quotes())
    return queue.tasks()


def main() -> None:
    quotes = Settings.from_env(os.environ)
    mail = quotes.with_changes(
        queue_name=os.environ.get("MAIL_QUEUE_NAME", "mail"),
        queue_table=os.environ.get("MAIL_QUEUE_TABLE", "public.mail"),
        queue_subscriber_table=None,
        queue_concurrency=2,
        queue_pool_size=None,
    )
    run_workers([Quotes(quotes), Mail(mail)])


if __name__ == "__main__":
    if "--in-memory" in sys.argv:
        for row in demo_in_memory():
            print(row["processo"], row["status"], row["mensagem"])
    else:
        main()
