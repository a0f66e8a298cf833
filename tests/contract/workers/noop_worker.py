"""A worker that needs nothing but its queue: each task returns at once (a payload
``{"sleep": s}`` sleeps that long first). For processes whose queues live in different
databases (WORKERS_JSON), where the contract worker's side tables would not."""

from __future__ import annotations

import json
import os
import time

from nsj_queue_lib import WorkerBase


class NoopWorker(WorkerBase):
    def execute(self, payload, tarefa, bd_conn):
        spec = json.loads(payload) if isinstance(payload, str) and payload.startswith("{") else {}
        time.sleep(float(spec.get("sleep", 0)))
        return f"done by {os.getpid()}"
