"""Per-task overrides at enqueue (issue 43, CONTRACT.md section 8): ``max_retry``,
``timeout_s`` and ``next_try_priority`` given to ``insert_task`` / per item of
``insert_tasks`` win over the ``@Task`` options, which win over the queue's defaults.

Workers run in this process on PostgreSQL, MariaDB and both socket-server backends
(SingleStore's included: the overrides need no unique key).
"""

from __future__ import annotations

import time

import pytest

from nsj_queue_lib import Task, WorkerBase, current_task
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)


def attempts(backend, task_id: int) -> list[dict]:
    return backend.rows("(id = %s OR id_inicial = %s) AND NOT dead", (task_id, task_id))


def failing_worker(backend) -> WorkerBase:
    class Failing(WorkerBase):
        # The @Task option (4 attempts) over the queue's default (100, 10 minutes apart).
        @Task("declarado", max_retry=4, retry_base_s=0.05)
        def declared(self, payload, tarefa, bd_conn):
            raise RuntimeError(f"declarado attempt {tarefa['tentativa']}")

        # No @Task: the queue's defaults (QUEUE_MAX_RETRY) apply.
        def execute(self, payload, tarefa, bd_conn):
            raise RuntimeError(f"execute attempt {tarefa['tentativa']}")

    return Failing(
        backend.settings(
            queue_max_retry=3, queue_base_interval_retry=0.05 / 60, queue_concurrency=2
        )
    )


@pytest.mark.parametrize("bulk", [False, True], ids=["insert_task", "insert_tasks"])
def test_max_retry_and_next_try_priority_win_over_task_and_queue_defaults(backend, bulk):
    worker = backend.run(failing_worker(backend))
    over_task, plain_task, over_queue, plain_queue = backend.enqueue(
        [
            dict(processo="declarado", max_retry=2, next_try_priority=7),
            dict(processo="declarado", prioridade=60),
            dict(processo="livre", max_retry=1),
            dict(processo="livre"),
        ],
        bulk=bulk,
    )
    expected = {over_task: 2, plain_task: 4, over_queue: 1, plain_queue: 3}

    def settled() -> bool:
        return all(
            len(rows) == n and rows[-1]["estouro_tentativas"]
            for task_id, n in expected.items()
            for rows in [attempts(backend, task_id)]
        )

    wait_for(settled, 20, "every task to run out of its attempts")
    assert worker.stop() == 0
    for task_id, n in expected.items():
        rows = attempts(backend, task_id)
        assert [r["tentativa"] for r in rows] == list(range(1, n + 1)), task_id
        assert f"maximum of {n} attempts" in rows[-1]["mensagem"], rows[-1]["mensagem"]
    # The overrides are carried by every retry; a retry gets next_try_priority when given.
    overridden = attempts(backend, over_task)
    assert [r["prioridade"] for r in overridden] == [50, 7]
    assert [(r["max_retry"], r["next_try_priority"]) for r in overridden] == [(2, 7), (2, 7)]
    assert [r["prioridade"] for r in attempts(backend, plain_task)] == [60] * 4
    assert {r["max_retry"] for r in attempts(backend, plain_queue)} == {None}


def test_timeout_s_at_enqueue_wins_over_the_task_option(backend):
    class Timed(WorkerBase):
        @Task("lento", timeout_s=60, retry_base_s=0.1)
        def slow(self, payload, tarefa, bd_conn):
            if tarefa["tentativa"] == 1:
                while True:  # cooperative: stops when its timeout asks it to
                    current_task().check_cancelled()
                    time.sleep(0.02)
            return "second attempt in time"

    worker = backend.run(Timed(backend.settings(queue_concurrency=2)))
    started = time.monotonic()
    [task_id] = backend.enqueue([dict(processo="lento", timeout_s=0.5)])
    wait_for(
        lambda: backend.statuses() == {"falha": 1, "sucesso": 1}, 20, "the timeout and its retry"
    )
    elapsed = time.monotonic() - started
    assert worker.stop() == 0
    first = backend.row(task_id)
    assert first["mensagem"].startswith("timeout: the attempt ran longer than 0.5 s"), first
    assert first["timeout_s"] == pytest.approx(0.5)
    assert elapsed < 30  # the @Task's 60 s did not apply


def test_bad_overrides_are_refused_before_any_sql():
    from nsj_queue_lib.task_rows import task_row

    base = dict(origem="o", destino="d", processo="p", chave_externa="k", payload="x")
    for bad, match in [
        (dict(max_retry=0), "max_retry must be >= 1"),
        (dict(max_retry=1.5), "max_retry must be an integer"),
        (dict(timeout_s=0), "timeout_s must be > 0"),
        (dict(timeout_s=float("nan")), "timeout_s must be a finite number"),
        (dict(next_try_priority=-1), "next_try_priority must be >= 0"),
        (dict(next_try_priority=True), "next_try_priority must be an integer"),
    ]:
        with pytest.raises(ValueError, match=match):
            task_row({**base, **bad}, pub_sub=False)
    row = task_row({**base, "max_retry": 3, "timeout_s": 2, "next_try_priority": 9}, False)
    assert (row["max_retry"], row["timeout_s"], row["next_try_priority"]) == (3, 2.0, 9)
