"""The contract worker with durable steps and waits (issue 41 items 4 and 5).

Each processo writes rows into CONTRACT_EXEC_TABLE (chave ``<chave_externa>-<what>``) on
``bd_conn``; the payload (JSON) steers it:

- "two_steps": step "a" writes ``-a``, step "b" writes ``-b``, then a plain write
  ``-end`` (in the task's final transaction). ``{"hang": true}``: on attempt 1, sleep
  60 s between the steps (a kill -9 target); ``{"fail_after_a": [1]}``: raise after step
  "a" on these attempts. Returns the two steps' results.
- "yields" (a generator with ``durable_steps=True``): 3 yields, each after writing
  ``-<n>``, skipping the ones earlier attempts committed; ``{"hang_at": 2}`` on
  attempt 1 sleeps 60 s before its 2nd yield.
- "sleeper": step "before" writes ``-before``; ``current_task().sleep(spec["sleep"])``;
  then writes ``-after``.
- "waiter": ``current_task().wait_event("go", spec["timeout"])`` and writes
  ``-got:<payload>``, or ``-timeout`` on ``TimeoutError``.
- "quick": writes ``-quick``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

from nsj_queue_lib import Task, current_task
from tests.contract.workers.contract_worker import ContractWorker, _spec


class StepsContractWorker(ContractWorker):
    def _row(self, bd_conn, tarefa, what: str) -> None:
        with bd_conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {self.exec_table} (task_id, chave, pid) VALUES (%s, %s, %s)",
                (tarefa["id"], f"{tarefa['chave_externa']}-{what}", os.getpid()),
            )

    def _written(self, bd_conn, tarefa, what: str) -> dict:
        self._row(bd_conn, tarefa, what)
        return {"step": what, "attempt": tarefa["tentativa"]}

    @Task("two_steps")
    def two_steps(self, payload, tarefa, bd_conn):
        spec = _spec(payload)
        task = current_task()
        a = task.step("a", self._written, bd_conn, tarefa, "a")
        if spec.get("hang") and tarefa["tentativa"] == 1:
            time.sleep(60)
        if tarefa["tentativa"] in spec.get("fail_after_a", []):
            raise RuntimeError("failing after step a")
        b = task.step("b", self._written, bd_conn, tarefa, "b")
        self._row(bd_conn, tarefa, "end")
        return json.dumps([a, b])

    @Task("yields", durable_steps=True)
    def yields(self, payload, tarefa, bd_conn):
        spec = _spec(payload)
        for n in range(current_task().durable_yields + 1, 4):
            self._row(bd_conn, tarefa, str(n))
            if n == spec.get("hang_at") and tarefa["tentativa"] == 1:
                time.sleep(60)
            yield (n, 3, f"step {n}")
        return "3 yields"

    @Task("sleeper")
    def sleeper(self, payload, tarefa, bd_conn):
        spec = _spec(payload)
        current_task().step("before", self._written, bd_conn, tarefa, "before")
        current_task().sleep(spec["sleep"])
        self._row(bd_conn, tarefa, "after")
        return "slept"

    @Task("waiter")
    def waiter(self, payload, tarefa, bd_conn):
        spec = _spec(payload)
        try:
            got = current_task().wait_event("go", spec["timeout"])
        except TimeoutError:
            self._row(bd_conn, tarefa, "timeout")
            return "timed out"
        self._row(bd_conn, tarefa, f"got:{json.dumps(got, sort_keys=True)}")
        return "got it"

    @Task("quick")
    def quick(self, payload, tarefa, bd_conn):
        self._row(bd_conn, tarefa, "quick")
        return "quick"


class AsyncStepsContractWorker(StepsContractWorker):
    """With an ``async def`` handler too: the worker runs its sync handlers in the async
    slots' handler threads (runtime/async_slots.py)."""

    @Task("async_quick")
    async def async_quick(self, payload, tarefa, bd_conn):
        return "async"


if __name__ == "__main__":
    StepsContractWorker().run()
