"""The smallest worker, in the shape of the original project's ``worker_fila_teste.py``.

A ``WorkerBase`` subclass with ``execute`` (and optionally ``execute_dead``),
made runnable by calling ``run()``::

    DB_HOST=localhost DB_BASE=app DB_USER=app \\
    QUEUE_NAME=fila_teste QUEUE_TABLE=public.fila_teste \\
    python examples/worker_fila_teste.py

Settings come from the environment (see docs/reference/environment.md).
``examples/worker_simple.py`` is a fuller example that writes its results to a
table in the task's transaction and can simulate failures.
"""

from __future__ import annotations

import logging
from typing import Any

from nsj_queue_lib.worker_base import WorkerBase

# A child of the "nsj_queue_lib" logger: it goes wherever the worker's logs go.
logger = logging.getLogger("nsj_queue_lib.examples.worker_fila_teste")


class WorkerFilaTeste(WorkerBase):
    def execute(self, payload: str, tarefa: dict[str, Any], bd_conn) -> str:
        # Runs inside a transaction on bd_conn: write your data with bd_conn
        # (never commit); the task becomes 'sucesso' in the same transaction.
        # Raise to fail the attempt: everything written is rolled back and the
        # task is retried after tentativa x QUEUE_BASE_INTERVAL_RETRY minutes.
        agora = bd_conn.execute("SELECT clock_timestamp()").fetchone()[0]
        logger.info("tarefa %s (tentativa %s): %s", tarefa["id"], tarefa["tentativa"], payload)
        return f"executada em {agora:%Y-%m-%d %H:%M:%S}"

    def execute_dead(self, payload: str, tarefa: dict[str, Any], bd_conn) -> str:
        # The task failed QUEUE_MAX_RETRY times: compensate, alert, park it...
        logger.warning("tarefa %s esgotou as tentativas: %s", tarefa["live_id"], payload)
        return "fila de mortos tratada: tarefa registrada no log"


if __name__ == "__main__":
    WorkerFilaTeste().run()
