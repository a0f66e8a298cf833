"""A fan-out and fan-in: one task spawns many, one more runs after all of them.

``listar`` (a list request) spawns one ``detalhar`` task per item in its own
transaction, then one ``carregar`` task ``after`` all of them: the children
exist exactly when ``listar`` succeeds, and ``carregar`` runs once, after the
last ``detalhar`` ended 'sucesso', reading their results with ``parents()``.
The caller waits for the whole thing with ``wait_for_task``.

Run a worker, then enqueue and wait (the usual environment: DB_HOST, DB_BASE,
DB_USER, QUEUE_NAME, QUEUE_TABLE)::

    python examples/workflow_fan_out.py            # the worker
    python examples/workflow_fan_out.py enqueue    # another shell
"""

from __future__ import annotations

import json
import os
import sys

from nsj_queue_lib import QueueClient, Settings, Task, WorkerBase, current_task


class WorkflowWorker(WorkerBase):
    @Task("listar")
    def listar(self, payload: str, tarefa: dict, bd_conn) -> str:
        task = current_task()
        items = json.loads(payload)["items"]
        # In this task's transaction: they exist once it commits 'sucesso'.
        children = [task.spawn("detalhar", {"item": item}) for item in items]
        last = task.spawn("carregar", {"count": len(items)}, after=children)
        return json.dumps({"children": len(children), "carregar": last})

    @Task("detalhar")
    def detalhar(self, payload: str, tarefa: dict, bd_conn) -> str:
        item = json.loads(payload)["item"]
        return f"detail of {item}"  # becomes the task's mensagem

    @Task("carregar")
    def carregar(self, payload: str, tarefa: dict, bd_conn) -> str:
        parents = current_task().parents()  # {id: get_task's dict}, every one 'sucesso'
        details = sorted(parent["mensagem"] for parent in parents.values())
        return f"loaded {len(details)}: {', '.join(details)}"


def enqueue_and_wait() -> None:
    import psycopg

    from nsj_queue_lib.db.driver import make_driver

    settings = Settings.from_env(os.environ)
    with psycopg.connect(make_driver(settings).conninfo(), autocommit=True) as conn:
        client = QueueClient(conn, settings.queue_table)
        root = client.insert_task("example", "workflow", "listar", "1", {"items": ["a", "b", "c"]})
        done = client.wait_for_task(root, timeout_s=30)
        carregar = json.loads(done["mensagem"])["carregar"]
        print(client.wait_for_task(carregar, timeout_s=30)["mensagem"])


if __name__ == "__main__":
    enqueue_and_wait() if sys.argv[1:] == ["enqueue"] else WorkflowWorker().run()
