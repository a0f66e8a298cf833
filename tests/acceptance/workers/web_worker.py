"""The browser test's worker (tests/acceptance/test_web_console.py).

The payload (JSON) steers it:
  {"steps": 40, "step_seconds": 0.25}  report progress step by step, stopping when cancelled
  {"fail_first": true}                 raise on the first attempt, succeed on any later one
  {"fail_always": true}                raise on every attempt
Run as ``python web_worker.py`` with the worker's environment variables.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

from nsj_queue_lib import WorkerBase, current_task


class WebWorker(WorkerBase):
    def execute(self, payload, tarefa, bd_conn):
        spec = json.loads(payload)
        if spec.get("fail_first") and tarefa["tentativa"] == 1:
            raise RuntimeError("first attempt fails on purpose")
        if spec.get("fail_always"):
            raise ValueError(f"invoice {spec.get('invoice')} refused: the tax service said no")
        task = current_task()
        steps = int(spec.get("steps", 0))
        for done in range(1, steps + 1):
            task.check_cancelled()
            task.report_progress(done, steps, f"step {done} of {steps}")
            time.sleep(float(spec.get("step_seconds", 0.25)))
        return "done"


if __name__ == "__main__":
    WebWorker().run()
