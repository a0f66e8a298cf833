"""The async contract worker with pipelines (generator handlers) too.

processo "steps" (a generator) and "steps_async" (an async generator) write one
row per step into CONTRACT_EXEC_TABLE (chave ``<chave_externa>-<step>``, in the
task's transaction) and yield ``(step, steps, "step N")`` after each. The
payload steers them:
  {"steps": 3}         how many steps (default 3)
  {"sleep": 0.2}       sleep that long after each step's write (time.sleep / asyncio.sleep)
  {"sleep_on": [1]}    ... only on these attempts
  {"started": true}    record the start in the started table first (visible at once)
  {"hang_at": 2}       on attempt 1, sleep 60 s at that step (a kill -9 target)
  {"hold": PATH}       after yielding step 1, wait (up to 30 s) until the file PATH exists,
                       so a test sees the progress however slowly it polls
The sync pipeline returns "<steps> steps done"; the async one ends with its last
message, "step <steps>".
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

from nsj_queue_lib import Task
from tests.contract.workers.async_worker import AsyncContractWorker
from tests.contract.workers.contract_worker import _spec


def _plan(payload, tarefa) -> tuple[int, float, int | None]:
    """(steps, seconds to sleep after each, the step to hang at)."""
    spec = _spec(payload)
    attempt = tarefa["tentativa"]
    sleep = float(spec.get("sleep", 0)) if attempt in spec.get("sleep_on", [attempt]) else 0.0
    hang_at = spec.get("hang_at") if attempt == 1 else None
    return int(spec.get("steps", 3)), sleep, hang_at


def _hold(payload) -> None:
    path = _spec(payload).get("hold")
    deadline = time.monotonic() + 30
    while path and not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


class PipelineContractWorker(AsyncContractWorker):
    @Task("steps")
    def steps(self, payload, tarefa, bd_conn):
        count, sleep, hang_at = _plan(payload, tarefa)
        if _spec(payload).get("started"):
            self._record_start(tarefa["id"])
        for step in range(1, count + 1):
            with bd_conn.cursor() as cur:
                cur.execute(*self._write(tarefa, step))
            time.sleep(60 if step == hang_at else sleep)
            yield (step, count, f"step {step}")
            if step == 1:
                _hold(payload)
        return f"{count} steps done"

    @Task("steps_async")
    async def steps_async(self, payload, tarefa, bd_conn):
        count, sleep, hang_at = _plan(payload, tarefa)
        if _spec(payload).get("started"):
            await asyncio.to_thread(self._record_start, tarefa["id"])
        for step in range(1, count + 1):
            await bd_conn.execute(*self._write(tarefa, step))
            await asyncio.sleep(60 if step == hang_at else sleep)
            yield (step, count, f"step {step}")
            if step == 1:
                await asyncio.to_thread(_hold, payload)

    def _write(self, tarefa, step: int) -> tuple[str, tuple]:
        return (
            f"INSERT INTO {self.exec_table} (task_id, chave, pid) VALUES (%s, %s, %s)",
            (tarefa["id"], f"{tarefa['chave_externa']}-{step}", os.getpid()),
        )


if __name__ == "__main__":
    PipelineContractWorker().run()
