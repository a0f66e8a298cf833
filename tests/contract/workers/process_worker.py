"""The contract worker of process instances (issue 42; CONTRACT.md section 8).

Each processo works on ``current_task().process`` and writes rows into
CONTRACT_EXEC_TABLE (chave ``<process id>-<what>``) on ``bd_conn``, in the task's
transaction; the payload (JSON) steers it:

- "count": ``state["n"]`` + 1 and ``state["seen"]`` + [payload's "seq"], an event
  "counted", rows ``-start`` and ``-end`` around an optional ``{"sleep": s}``; on
  attempt 1 with ``{"hang": true}`` it sleeps 60 s after writing (a kill -9 target).
  Returns ``{"n": n}`` (the call's response).
- "arm": ``set_timer(spec["in"], "fire", {"label": spec["label"]})``.
- "fire" (the timer): an event "fired" with the label, a row ``-fired:<label>``.
- "retire": ``remove_after(spec["after"])``.
- "break": raises ``PermanentError`` (dead-lettered at once: the process is corrupted).
- "fix" (a repair): ``status = "fixed"``, ``state["fixed"] = True``.
- "stepwise": ``state["seen"]`` + [attempt], a durable step, then a failure on attempt 1.
- "commits": commits ``bd_conn`` itself on attempt 1 (a handler's mistake: the attempt
  fails, and its commit group's transaction ends under the group).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

from nsj_queue_lib import PermanentError, Task, current_task
from tests.contract.workers.contract_worker import ContractWorker, _spec


class ProcessContractWorker(ContractWorker):
    def _row(self, bd_conn, tarefa, what: str) -> None:
        with bd_conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {self.exec_table} (task_id, chave, pid) VALUES (%s, %s, %s)",
                (tarefa["id"], f"{current_task().process.id}-{what}", os.getpid()),
            )

    @Task("count")
    def count(self, payload, tarefa, bd_conn):
        spec = _spec(payload)
        process = current_task().process
        self._row(bd_conn, tarefa, "start")
        if spec.get("sleep"):
            time.sleep(spec["sleep"])
        n = process.state.get("n", 0) + 1
        process.state["n"] = n
        process.state["seen"] = [*process.state.get("seen", []), spec.get("seq")]
        process.status = "counting"
        process.detail = f"{n} calls"
        process.emit("counted", {"n": n, "seq": spec.get("seq")})
        self._row(bd_conn, tarefa, "end")
        if spec.get("hang") and tarefa["tentativa"] == 1:
            time.sleep(60)
        return {"n": n}

    @Task("arm")
    def arm(self, payload, tarefa, bd_conn):
        spec = _spec(payload)
        return current_task().process.set_timer(spec["in"], "fire", {"label": spec["label"]})

    @Task("fire")
    def fire(self, payload, tarefa, bd_conn):
        label = json.loads(payload)["label"]
        current_task().process.emit("fired", label)
        self._row(bd_conn, tarefa, f"fired:{label}")
        return label

    @Task("retire")
    def retire(self, payload, tarefa, bd_conn):
        current_task().process.remove_after(_spec(payload)["after"])

    @Task("break")
    def broken(self, payload, tarefa, bd_conn):
        self._row(bd_conn, tarefa, "broke")  # rolled back with the failure
        raise PermanentError("the downstream refused the call")

    @Task("fix")
    def fix(self, payload, tarefa, bd_conn):
        process = current_task().process
        process.status = "fixed"
        process.state["fixed"] = True
        self._row(bd_conn, tarefa, "fixed")
        return "fixed"

    @Task("stepwise")
    def stepwise(self, payload, tarefa, bd_conn):
        task = current_task()
        task.process.state["seen"] = [*task.process.state.get("seen", []), tarefa["tentativa"]]
        task.step("s", int, 1)
        if tarefa["tentativa"] == 1:
            raise RuntimeError("failing after the step")
        return "done"

    @Task("commits")
    def commits(self, payload, tarefa, bd_conn):
        if tarefa["tentativa"] == 1:
            bd_conn.commit()
        return "committed"


if __name__ == "__main__":
    ProcessContractWorker().run()
