"""The Galera tests' worker: one row per committed run, one row per run whatever its end.

For each task the handler
  1. sleeps ``payload["ms"]`` milliseconds (the task's work),
  2. inserts ``(task_id, chave, pid, node, started, ended)`` into ``$GALERA_EXEC_TABLE``
     through ``bd_conn``: in the task's transaction, committed only with its success;
  3. inserts the same into ``$GALERA_RUNS_TABLE`` on an autocommit connection of its own
     (kept per thread): every run that reached its end, committed or not, so that a test
     can look for two runs of one task at the same time.
``started`` / ``ended`` are ``time.time()`` of this machine (every worker runs here).
Run as ``python galera_worker.py`` with the worker's environment variables.
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

NODE = os.environ.get("GALERA_NODE", "?")


class GaleraWorker(WorkerBase):
    def __init__(self) -> None:
        super().__init__()
        self.exec_table = os.environ["GALERA_EXEC_TABLE"]
        self.runs_table = os.environ["GALERA_RUNS_TABLE"]
        self._local = threading.local()

    def _side(self):
        conn = getattr(self._local, "conn", None)
        if conn is None or not conn.open:
            import pymysql

            s = self._settings
            conn = self._local.conn = pymysql.connect(
                host=s.db_host,
                port=s.db_port,
                user=s.db_user,
                password=s.db_pass,
                database=s.db_name,
                autocommit=True,
            )
        return conn

    def execute(self, payload, tarefa, bd_conn):
        started = time.time()
        spec = json.loads(payload) if isinstance(payload, str) and payload.startswith("{") else {}
        time.sleep(float(spec.get("ms", 10)) / 1000)
        ended = time.time()
        row = (tarefa["id"], tarefa["chave_externa"], os.getpid(), NODE, started, ended)
        with bd_conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {self.exec_table} (task_id, chave, pid, node, started, ended) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                row,
            )
        try:
            with self._side().cursor() as cur:
                cur.execute(
                    f"INSERT INTO {self.runs_table} (task_id, chave, pid, node, started, ended) "
                    "VALUES (%s, %s, %s, %s, %s, %s)",
                    row,
                )
        except Exception as exc:  # the record of a run is best effort
            print(f"galera_worker: runs row not written: {exc}", file=sys.stderr, flush=True)
            self._local.conn = None
        return f"done by {os.getpid()} on {NODE}"


if __name__ == "__main__":
    GaleraWorker().run()
