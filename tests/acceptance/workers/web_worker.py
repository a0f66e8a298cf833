"""The browser test's worker (tests/acceptance/test_web_console.py).

The payload (JSON) steers it:
  {"steps": 40, "step_seconds": 0.25}  report progress step by step, stopping when cancelled
  {"fail_first": true}                 raise on the first attempt, succeed on any later one
  {"fail_always": true}                raise on every attempt
A task of a process (tests/acceptance/test_web_process_console.py) works on its process:
  {"add": 5, "steps": 8}                 state["total"] += 5 after 8 steps of 0.25 s,
                                         an event "added"; returns the total
  {"remind_in": 600}                     a timer (processo "remind") due in that many seconds
  {"fail_always": true}                  as above: dead-lettered, the process corrupted
  a repair                               status "reconciled", the total recounted
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
        process = current_task().process
        if process is not None and not spec.get("fail_always"):
            return self._process_task(process, spec)
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

    def _process_task(self, process, spec):
        if process.kind == "repair":
            process.status = "reconciled"
            process.detail = "recounted after the failed call"
            process.emit("repaired", {"total": process.state.get("total", 0)})
            return {"total": process.state.get("total", 0)}
        steps = int(spec.get("steps", 0))
        for done in range(1, steps + 1):
            current_task().report_progress(done, steps)
            time.sleep(0.25)
        if "add" in spec:
            total = process.state.get("total", 0) + spec["add"]
            process.state["total"] = total
            process.state.setdefault("lines", []).append(spec["add"])
            process.status = "open"
            process.detail = f"{len(process.state['lines'])} lines, total {total}"
            process.emit("added", {"amount": spec["add"], "total": total})
        if "remind_in" in spec:
            process.set_timer(spec["remind_in"], "remind", {"why": "invoice due"})
        return {"total": process.state.get("total", 0)}


if __name__ == "__main__":
    WebWorker().run()
