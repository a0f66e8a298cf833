"""Durable steps: work that a retry does not repeat.

``bill_order`` reserves the stock and charges the customer as two durable steps:
each step's writes on ``bd_conn`` commit together with its result when the step
returns. If the worker dies (or the handler fails) after "reserve", the retry
gets the reservation's result back without reserving again, and goes on with
"charge". ``import_lines`` is a durable pipeline: each ``yield`` commits the lines
loaded so far, and a retry skips them (``current_task().durable_yields``).

Run a worker, then enqueue and wait (the usual environment: DB_HOST, DB_BASE,
DB_USER, QUEUE_NAME, QUEUE_TABLE; PostgreSQL or MySQL/MariaDB)::

    python examples/durable_steps.py            # the worker
    python examples/durable_steps.py enqueue    # another shell
"""

from __future__ import annotations

import json
import os
import sys

from nsj_queue_lib import QueueClient, Settings, Task, WorkerBase, current_task

LEDGER = "durable_example_ledger"  # the application's own table


def record(bd_conn, order: str, what: str) -> dict:
    """A business write on the handler's connection; its result goes into the checkpoint."""
    with bd_conn.cursor() as cur:
        cur.execute(f"INSERT INTO {LEDGER} (order_id, what) VALUES (%s, %s)", (order, what))
    return {"order": order, "done": what}


class DurableWorker(WorkerBase):
    @Task("bill_order", max_retry=5)
    def bill_order(self, payload: str, tarefa: dict, bd_conn) -> str:
        order = json.loads(payload)["order"]
        task = current_task()
        reserved = task.step("reserve", record, bd_conn, order, "reserved")
        # Committed here: a crash from now on never reserves twice.
        charged = task.step("charge", record, bd_conn, order, "charged")
        return json.dumps([reserved, charged])

    @Task("import_lines", durable_steps=True)
    def import_lines(self, payload: str, tarefa: dict, bd_conn):
        lines = json.loads(payload)["lines"]
        # A retry starts after the lines earlier attempts committed.
        for number in range(current_task().durable_yields, len(lines)):
            record(bd_conn, "import", lines[number])
            yield (number + 1, len(lines), f"line {number + 1}")  # commits this line
        return f"{len(lines)} lines imported"


def enqueue_and_wait() -> None:
    from nsj_queue_lib.db.driver import make_driver

    settings = Settings.from_env(os.environ)
    driver = make_driver(settings)
    conn = driver.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {LEDGER} (order_id varchar(100), what varchar(100))"
            )
        client = QueueClient(conn, settings.queue_table)
        bill = client.insert_task("example", "billing", "bill_order", "o-1", {"order": "o-1"})
        lines = client.insert_task(
            "example", "import", "import_lines", "f-1", {"lines": ["a", "b"]}
        )
        for task_id in (bill, lines):
            print(client.wait_for_task(task_id, timeout_s=30)["mensagem"])
    finally:
        conn.close()


if __name__ == "__main__":
    enqueue_and_wait() if sys.argv[1:] == ["enqueue"] else DurableWorker().run()
