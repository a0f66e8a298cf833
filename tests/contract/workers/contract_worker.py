"""The contract suite's worker: records each execution in the task's own transaction.

Works on every backend (psycopg 3 or PyMySQL connections: only the DB-API
cursor is used). Run as ``python contract_worker.py`` with the worker's
environment, or build ``ContractWorker(settings, exec_table=..., started_table=...)``
in-process.

The payload (JSON, optional) steers it:
  {"sleep": 2.5}            sleep that many seconds inside the handler
  {"sleep_on": [1]}         ... only on these attempts (``tentativa``)
  {"until": "/path"}        ... or less: until that file exists (the test says when)
  {"fail_on": [1, 2]}       raise on these attempts (after writing: the write must roll back)
  {"started": true}         first record the start in the started table on a separate
                            autocommit connection (visible at once)

Environment (process mode): CONTRACT_EXEC_TABLE, CONTRACT_STARTED_TABLE, and
CONTRACT_READY_FILE, a file written once the worker's dispatcher is connected
(LISTEN issued, or subscribed to the socket server), so a test knows the
worker will see what it enqueues next.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[3])
)  # the repository, for a source checkout

from nsj_queue_lib import WorkerBase
from nsj_queue_lib.db.driver import make_driver


def _spec(payload) -> dict:
    if isinstance(payload, str) and payload.lstrip().startswith("{"):
        return json.loads(payload)
    return {}


def side_connection(settings):
    """A new autocommit connection to the worker's database (outside the task's transaction)."""
    if settings.db_driver == "POSTGRES":
        import psycopg

        return psycopg.connect(make_driver(settings).conninfo(), autocommit=True)
    import pymysql

    return pymysql.connect(
        host=settings.db_host,
        port=settings.db_port,
        user=settings.db_user,
        password=settings.db_pass,
        database=settings.db_name,
        autocommit=True,
    )


def _pause(seconds: float, until: str | None) -> None:
    """``seconds``, or less once the file ``until`` exists."""
    if until is None:
        time.sleep(seconds)
        return
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not os.path.exists(until):
        time.sleep(0.05)


class ContractWorker(WorkerBase):
    def __init__(
        self,
        settings=None,
        exec_table: str | None = None,
        started_table: str | None = None,
        ready_file: str | None = None,
    ):
        super().__init__(settings)
        self.exec_table = exec_table or os.environ["CONTRACT_EXEC_TABLE"]
        self.started_table = started_table or os.environ.get("CONTRACT_STARTED_TABLE")
        self.ready_file = (
            ready_file if ready_file is not None else os.environ.get("CONTRACT_READY_FILE")
        )

    def execute(self, payload, tarefa, bd_conn):
        spec = _spec(payload)
        attempt = tarefa["tentativa"]
        if spec.get("started"):
            side = side_connection(self._settings)
            try:
                with side.cursor() as cur:
                    cur.execute(
                        f"INSERT INTO {self.started_table} (task_id, pid) VALUES (%s, %s)",
                        (tarefa["id"], os.getpid()),
                    )
            finally:
                side.close()
        with bd_conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {self.exec_table} (task_id, chave, pid) VALUES (%s, %s, %s)",
                (tarefa["id"], tarefa["chave_externa"], os.getpid()),
            )
        if spec.get("sleep") and attempt in spec.get("sleep_on", [attempt]):
            _pause(float(spec["sleep"]), spec.get("until"))
        if attempt in spec.get("fail_on", []):
            raise RuntimeError(f"planned failure of attempt {attempt}")
        return f"done by {os.getpid()}"

    def run_until_stopped(self, install_signal_handlers: bool = True) -> int:
        if self.ready_file:
            threading.Thread(target=self._signal_ready, name="contract-ready", daemon=True).start()
        return super().run_until_stopped(install_signal_handlers)

    def _signal_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            runtime = self._runtime
            if runtime is not None and runtime.dispatcher._control is not None:
                Path(self.ready_file).write_text(str(os.getpid()))
                return
            time.sleep(0.01)


if __name__ == "__main__":
    ContractWorker().run()
