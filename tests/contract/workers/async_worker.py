"""The contract worker with ``async def`` handlers next to its sync ``execute``.

processo "async": the payload steers it as ``contract_worker.py``'s does ("sleep",
"sleep_on", "fail_on", "started"), but it awaits: its write goes through the
async ``bd_conn`` (a psycopg ``AsyncConnection`` on PostgreSQL, the threaded
PyMySQL connection on MariaDB) and it sleeps with ``asyncio.sleep``. Any other
processo runs the sync ``ContractWorker.execute``. Extra payload keys:
  {"block": 1.5}     block the event loop that long (time.sleep in a coroutine)
  {"commit": true}   commit bd_conn inside the handler (a misuse the worker reports)
  {"close": true}    close bd_conn inside the handler (a misuse the worker reports)
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

from nsj_queue_lib import Task
from tests.contract.workers.contract_worker import (
    ContractWorker,
    _spec,
    side_connection,
)


class AsyncContractWorker(ContractWorker):
    @Task("async")
    async def run_async(self, payload, tarefa, bd_conn):
        spec = _spec(payload)
        attempt = tarefa["tentativa"]
        if spec.get("started"):
            await asyncio.to_thread(self._record_start, tarefa["id"])
        await bd_conn.execute(
            f"INSERT INTO {self.exec_table} (task_id, chave, pid) VALUES (%s, %s, %s)",
            (tarefa["id"], tarefa["chave_externa"], os.getpid()),
        )
        if spec.get("sleep") and attempt in spec.get("sleep_on", [attempt]):
            await asyncio.sleep(float(spec["sleep"]))
        if spec.get("block"):
            time.sleep(float(spec["block"]))  # the misuse the loop watchdog reports
        if spec.get("commit"):
            await bd_conn.commit()
        if spec.get("close"):
            await bd_conn.close()
        if attempt in spec.get("fail_on", []):
            raise RuntimeError(f"planned async failure of attempt {attempt}")
        return f"async done by {os.getpid()}"

    def _record_start(self, task_id: int) -> None:
        side = side_connection(self._settings)
        try:
            with side.cursor() as cur:
                cur.execute(
                    f"INSERT INTO {self.started_table} (task_id, pid) VALUES (%s, %s)",
                    (task_id, os.getpid()),
                )
        finally:
            side.close()


if __name__ == "__main__":
    AsyncContractWorker().run()
