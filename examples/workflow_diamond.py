"""A workflow built ahead: extract, then transform and validate side by side, then load.

``Workflow("nightly")`` collects the four tasks and their dependencies; ``enqueue``
writes them in the caller's transaction and returns the workflow's id. ``transformar``
and ``validar`` wait ('aguardando') for ``extrair``; ``carregar`` for both. The caller
waits for the last task with ``wait_for_task`` and prints ``get_workflow``'s view: the
workflow's status and each task's with its parents.

Run a worker, then enqueue and wait (the usual environment: DB_HOST, DB_BASE,
DB_USER, QUEUE_NAME, QUEUE_TABLE)::

    python examples/workflow_diamond.py            # the worker
    python examples/workflow_diamond.py enqueue    # another shell
"""

from __future__ import annotations

import json
import os
import sys

from nsj_queue_lib import QueueClient, Settings, Task, WorkerBase, Workflow, current_task


class NightlyWorker(WorkerBase):
    @Task("extrair")
    def extrair(self, payload: str, tarefa: dict, bd_conn) -> str:
        return f"extracted {json.loads(payload)['day']}"

    @Task("transformar")
    def transformar(self, payload: str, tarefa: dict, bd_conn) -> str:
        return "transformed"

    @Task("validar")
    def validar(self, payload: str, tarefa: dict, bd_conn) -> str:
        return "validated"

    @Task("carregar")
    def carregar(self, payload: str, tarefa: dict, bd_conn) -> str:
        parents = current_task().parents()  # transformar's and validar's, both 'sucesso'
        return "loaded after " + ", ".join(sorted(p["mensagem"] for p in parents.values()))


def build(day: str) -> tuple[Workflow, object]:
    wf = Workflow(f"nightly {day}")
    extract = wf.add(processo="extrair", payload={"day": day}, chave_externa=day)
    transform = wf.add(processo="transformar", payload={}, chave_externa=day, after=[extract])
    validate = wf.add(processo="validar", payload={}, chave_externa=day, after=[extract])
    load = wf.add(processo="carregar", payload={}, chave_externa=day, after=[transform, validate])
    return wf, load


def enqueue_and_wait() -> None:
    import psycopg

    from nsj_queue_lib.db.driver import make_driver

    settings = Settings.from_env(os.environ)
    with psycopg.connect(make_driver(settings).conninfo()) as conn:
        client = QueueClient(conn, settings.queue_table)
        wf, load = build("2026-11-28")
        workflow_id = wf.enqueue(client)  # in this transaction
        conn.commit()  # the four tasks exist from here on
        client.wait_for_task(load.id, timeout_s=30)
        view = client.get_workflow(workflow_id)
        conn.rollback()  # end the read's transaction
    print(f"workflow {view['id']} ({view['name']}): {view['status']}")
    for task in view["tasks"]:
        after = ", ".join(map(str, task["parents"])) or "-"
        print(f"  {task['id_inicial']} {task['processo']} after {after}: {task['mensagem']}")


if __name__ == "__main__":
    enqueue_and_wait() if sys.argv[1:] == ["enqueue"] else NightlyWorker().run()
