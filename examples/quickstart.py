"""Quick start: enqueue a task in your transaction, then run a worker that processes it."""

import json
import os
import sys

import psycopg

from nsj_queue_lib import QueueClient, Settings, WorkerBase
from nsj_queue_lib.db.postgres.conninfo import conninfo


class HelloWorker(WorkerBase):
    def execute(self, payload: str, tarefa: dict, bd_conn) -> str:
        # Runs in a transaction on bd_conn; returning commits it with status 'sucesso'.
        return f"hello, {json.loads(payload)['name']}"  # stored in the task's mensagem


def enqueue() -> None:
    settings = Settings.from_env(os.environ)  # the same variables the worker reads
    with psycopg.connect(conninfo(settings)) as conn:
        with conn.transaction():  # your transaction: the task exists once it commits
            client = QueueClient(conn, settings.queue_table)
            task_id = client.insert_task(
                origem="quickstart",
                destino="hello",
                processo="greet",
                chave_externa="1",
                payload={"name": "world"},
            )
    print(f"enqueued task {task_id}")


if __name__ == "__main__":
    enqueue() if sys.argv[1:] == ["enqueue"] else HelloWorker().run()
