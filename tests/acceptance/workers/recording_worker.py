"""A test worker: records each execution in ``$TEST_EXEC_TABLE`` in the task's transaction.

The payload (JSON, optional) steers it:
  {"sleep": 2.5}            sleep that many seconds inside the handler
  {"sleep_on": [1]}         ... only on these attempts (``tentativa``)
  {"fail_on": [1, 2]}       raise on these attempts (after writing: the write must roll back)
  {"started": true}         first record the start in ``$TEST_STARTED_TABLE`` on a
                            separate autocommit connection (visible at once)
Run as ``python recording_worker.py`` with the worker's environment variables.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[3])
)  # the repository, for a source checkout

import psycopg

from nsj_queue_lib import WorkerBase


def _spec(payload: str | None) -> dict:
    if payload and payload.lstrip().startswith("{"):
        return json.loads(payload)
    return {}


class RecordingWorker(WorkerBase):
    def execute(self, payload, tarefa, bd_conn):
        spec = _spec(payload)
        attempt = tarefa["tentativa"]
        if spec.get("started"):
            with psycopg.connect(
                bd_conn.info.dsn, password=os.environ.get("DB_PASS") or None, autocommit=True
            ) as side:
                side.execute(
                    f"INSERT INTO {os.environ['TEST_STARTED_TABLE']} (task_id, pid) VALUES (%s, %s)",
                    (tarefa["id"], os.getpid()),
                )
        bd_conn.execute(
            f"INSERT INTO {os.environ['TEST_EXEC_TABLE']} (task_id, chave, pid) VALUES (%s, %s, %s)",
            (tarefa["id"], tarefa["chave_externa"], os.getpid()),
        )
        if spec.get("sleep") and attempt in spec.get("sleep_on", [attempt]):
            time.sleep(float(spec["sleep"]))
        if attempt in spec.get("fail_on", []):
            raise RuntimeError(f"planned failure of attempt {attempt}")
        return f"done by {os.getpid()}"


if __name__ == "__main__":
    RecordingWorker().run()
