"""Pipelines (issue 18 item 3) on PostgreSQL and MariaDB: generator handlers in a real worker.

``workers/pipeline_worker.py`` has a sync pipeline ("steps") and an async one
("steps_async"); one row per step is written in the task's transaction. The
pipeline commits once, with the task; its progress is seen while it runs; a
cancel or a timeout at a checkpoint stops it with nothing committed; a worker
killed mid-pipeline loses nothing (the attempt is rescued and retried, the
killed attempt's writes never committed). In-process workers unless kill -9
is the point.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from nsj_queue_lib import TaskCancelled
from nsj_queue_lib.runtime.retry import ORPHAN_MESSAGE
from tests.contract.test_async_handlers import BOTH, RETRY_BASE_MINUTES, async_worker
from tests.contract.test_lifecycle import cancel, view
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)

PIPELINE_WORKER = Path(__file__).resolve().parent / "workers" / "pipeline_worker.py"


def pipeline_worker(backend, **changes):
    from tests.contract.workers.pipeline_worker import PipelineContractWorker

    return async_worker(backend, PipelineContractWorker, **changes)


def committed(backend) -> list[str]:
    return sorted(r["chave"] for r in backend.exec_rows())


@BOTH
def test_sync_and_async_pipelines_commit_once_with_their_task_and_show_progress(backend, tmp_path):
    running = backend.run(pipeline_worker(backend, queue_concurrency=2))
    assert running.runtime.executor.asynchronous
    # Both pipelines wait after their first step until the progress of both was seen: on a
    # loaded machine one look at a task took 0.3 s and a 0.8 s window was missed.
    seen_both = tmp_path / "seen-both"
    spec = json.dumps({"steps": 3, "sleep": 0.1, "hold": str(seen_both)})
    tasks = dict(
        zip(
            "sa",
            backend.enqueue(
                [
                    dict(processo="steps", chave_externa="s", payload=spec),
                    dict(processo="steps_async", chave_externa="a", payload=spec),
                ]
            ),
            strict=True,
        )
    )
    sync_id, async_id = tasks["s"], tasks["a"]
    seen_running: set[str] = set()

    def progress_shows_while_nothing_is_committed() -> bool:
        for key, task_id in tasks.items():
            rows = [c for c in committed(backend) if c.startswith(f"{key}-")]
            task = view(backend, task_id)  # read after the rows: still running means none yet
            if task["status"] == "processando" and (task["progress"] or {}).get("done", 0) >= 1:
                assert rows == [], f"steps of {key} committed before its task: {rows}"
                seen_running.add(key)
        return seen_running == {"s", "a"}

    wait_for(progress_shows_while_nothing_is_committed, 10, "both pipelines' progress")
    seen_both.touch()
    backend.wait_statuses({"sucesso": 2}, 15, "both pipelines to succeed")
    assert committed(backend) == ["a-1", "a-2", "a-3", "s-1", "s-2", "s-3"]
    assert backend.row(sync_id)["mensagem"] == "3 steps done"  # its return value
    assert backend.row(async_id)["mensagem"] == "step 3"  # its last message
    assert view(backend, async_id)["progress"] == {"done": 3, "total": 3, "message": "step 3"}
    assert running.stop() == 0


@BOTH
def test_a_pipeline_cancelled_at_a_checkpoint_ends_cancelada_and_one_that_yields_again_is_closed(
    backend,
):
    trace: list[str] = []

    def execute(payload, tarefa, bd_conn):  # a sync pipeline on the executor threads
        try:
            for step in range(1, 1000):
                with bd_conn.cursor() as cur:
                    cur.execute(
                        f"INSERT INTO {backend.exec_table} (task_id, chave, pid) "
                        "VALUES (%s, %s, 0)",
                        (tarefa["id"], f"{payload}-{step}"),
                    )
                try:
                    yield (step, 1000)
                except TaskCancelled:
                    trace.append(f"{payload}: cancelled at {step}")
                    if payload == "obeys":
                        raise
                time.sleep(0.02)
        finally:
            trace.append(f"{payload}: closed")

    running = backend.run(backend.function_worker(execute, queue_concurrency=2))
    assert not running.runtime.executor.asynchronous
    obeys, ignores = backend.enqueue([dict(payload="obeys"), dict(payload="ignores")])
    for task_id in (obeys, ignores):
        wait_for(lambda t=task_id: view(backend, t)["progress"] is not None, 10, "it to start")
        assert cancel(backend, task_id) == "processando"
    backend.wait_statuses({"cancelada": 2}, 10, "both pipelines to stop")
    assert committed(backend) == []  # no step of either was committed
    assert sorted(t.split(" at ")[0] for t in trace) == sorted(
        ["obeys: cancelled", "obeys: closed", "ignores: cancelled", "ignores: closed"]
    )
    assert running.stop() == 0


@BOTH
def test_a_pipeline_past_its_timeout_stops_at_a_checkpoint_and_is_retried(backend):
    def execute(payload, tarefa, bd_conn):
        with bd_conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {backend.exec_table} (task_id, chave, pid) VALUES (%s, 'x', 0)",
                (tarefa["id"],),
            )
        while tarefa["tentativa"] == 1:
            time.sleep(0.02)
            yield
        return f"attempt {tarefa['tentativa']}"

    running = backend.run(
        backend.function_worker(
            execute,
            queue_task_timeout=0.5,
            queue_task_timeout_grace=30,  # stopped by its checkpoints, never given up
            queue_base_interval_retry=RETRY_BASE_MINUTES,
        )
    )
    [task_id] = backend.enqueue([dict(payload="{}")])
    backend.wait_statuses({"falha": 1, "sucesso": 1}, 15, "the timeout and the retry")
    first = backend.row(task_id)
    assert first["mensagem"].startswith("timeout: the attempt ran longer than 0.5 s")
    assert view(backend, task_id)["mensagem"] == "attempt 2"
    [retry] = backend.rows("id_anterior = %s", (task_id,))
    assert [r["task_id"] for r in backend.exec_rows()] == [retry["id"]]  # the first rolled back
    assert running.runtime.lifecycle.timeouts.given_up == 0
    assert running.stop() == 0


@BOTH
@pytest.mark.parametrize("processo", ["steps", "steps_async"])
def test_kill_9_mid_pipeline_is_rescued_and_retried_with_nothing_of_the_killed_attempt(
    backend, processo
):
    victim = backend.start_process("victim", script=PIPELINE_WORKER)
    [task_id] = backend.enqueue(
        [
            dict(
                processo=processo,
                chave_externa="k",
                payload=json.dumps({"steps": 3, "hang_at": 2, "started": True}),
            )
        ]
    )
    wait_for(
        lambda: (view(backend, task_id)["progress"] or {}).get("done") == 1,
        15,
        "the victim to pass the first checkpoint",
    )
    victim.kill9()
    rescuer = backend.run(
        pipeline_worker(
            backend, queue_retry_thread_interval=0.3, queue_base_interval_retry=RETRY_BASE_MINUTES
        )
    )
    backend.wait_statuses({"falha_processando": 1, "sucesso": 1}, 15, "the rescue and the retry")
    assert ORPHAN_MESSAGE in backend.row(task_id)["mensagem"]
    [retry] = backend.rows("id_anterior = %s", (task_id,))
    # Every step of the retry, none of the killed attempt's (its step 1 and 2 rolled back).
    assert [(r["task_id"], r["chave"]) for r in backend.exec_rows()] == [
        (retry["id"], f"k-{step}") for step in (1, 2, 3)
    ]
    assert rescuer.stop() == 0
