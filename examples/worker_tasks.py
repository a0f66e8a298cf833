"""One worker, several kinds of task: ``@Task`` routes each ``processo`` to its method.

Run it against a queue with the usual environment::

    DB_HOST=localhost DB_BASE=app DB_USER=app \\
    QUEUE_NAME=fila_teste QUEUE_TABLE=public.fila_teste \\
    python examples/worker_tasks.py

or without any database, on ``nsj_queue_lib.testing.InMemoryQueue``, to watch
the routing and the retry policies at work (the clock is virtual, so the
retries run at once)::

    python examples/worker_tasks.py --in-memory

- ``nota_emitida``: up to 5 attempts, exponential back-off with full jitter
  (2 s, then up to 4 s, 8 s, ... never more than 60 s). A payload without
  ``"cliente"`` can never succeed: ``PermanentError``, dead letter at once.
- ``boleto_pago`` and ``pix_pago``: one method, the queue's default policy
  (QUEUE_MAX_RETRY attempts, linear QUEUE_BASE_INTERVAL_RETRY minutes).
- any other processo: ``execute``. ``execute_dead`` sees every dead letter.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from nsj_queue_lib import PermanentError, QueueClient, Task, WorkerBase


class WorkerTasks(WorkerBase):
    @Task("nota_emitida", max_retry=5, retry_backoff="exponential", retry_base_s=2, retry_max_s=60)
    def emitir_nota(self, payload: str, tarefa: dict[str, Any], bd_conn) -> str:
        nota = json.loads(payload)
        if "cliente" not in nota:
            raise PermanentError(f"nota {nota.get('numero')} has no cliente")
        if nota.get("erp_offline"):
            raise ConnectionError("ERP offline")  # retried with back-off
        return f"nota {nota['numero']} emitida para {nota['cliente']}"

    @Task("boleto_pago")
    @Task("pix_pago")
    def baixar_pagamento(self, payload: str, tarefa: dict[str, Any], bd_conn) -> str:
        return f"{tarefa['processo']}: pagamento {json.loads(payload)['id']} baixado"

    def execute(self, payload: str, tarefa: dict[str, Any], bd_conn) -> str:
        return f"{tarefa['processo']}: nothing to do"

    def execute_dead(self, payload: str, tarefa: dict[str, Any], bd_conn) -> str:
        return f"dead letter of task {tarefa['live_id']} ({tarefa['processo']}): support notified"


def demo_in_memory() -> list[dict[str, Any]]:
    """Run a few tasks on an in-memory queue; every attempt row, in order."""
    import random

    from nsj_queue_lib.testing import InMemoryQueue

    queue = InMemoryQueue(rng=random.Random(1))
    client = QueueClient(queue.connection(), "public.fila_teste")
    for processo, payload in (
        ("nota_emitida", {"numero": 1, "cliente": "ACME"}),
        ("nota_emitida", {"numero": 2}),
        ("nota_emitida", {"numero": 3, "cliente": "ACME", "erp_offline": True}),
        ("pix_pago", {"id": 7}),
        ("relatorio", {}),
    ):
        client.insert_task("exemplo", "worker_tasks", processo, None, payload)
    queue.run(WorkerTasks())
    return queue.tasks()


def main() -> None:
    if "--in-memory" in sys.argv[1:]:
        for row in demo_in_memory():
            kind = "dead letter" if row["dead"] else f"attempt {row['tentativa']}"
            print(
                f"#{row['id']:<3} {row['processo']:<13} {kind:<11} {row['status']:<8} {row['mensagem']}"
            )
        return
    WorkerTasks().run()  # settings from the environment; blocks until stopped


if __name__ == "__main__":
    main()
