"""The recording worker (``tests/acceptance/workers/recording_worker.py``) seen from the tests.

``spec`` writes the payload that steers it; ``exec_rows`` and ``started_ids``
read the side tables it writes (``<queue>_exec``, ``<queue>_started``);
``insert_many`` enqueues plain tasks in bulk; ``assert_rescued`` checks the
end of a crash recovery (the acceptance fixture ``long_task`` starts one).
"""

from __future__ import annotations

import json
from typing import Any

from tests.helpers.processes import WorkerProcess, fetch_rows, statuses, wait_for

WORKER = "recording_worker.py"


def spec(**kwargs: Any) -> str:
    """The payload that steers the recording worker (sleep, sleep_on, until, fail_on, started)."""
    return json.dumps(kwargs, sort_keys=True)


def exec_rows(conn, queue) -> list[tuple]:
    """(task_id, chave, pid) of every committed execution, in commit order."""
    return conn.execute(
        f"SELECT task_id, chave, pid FROM {queue.table}_exec ORDER BY at"
    ).fetchall()


def started_ids(conn, queue) -> list[int]:
    """The tasks whose handler started, in order (written at once, outside the task's transaction)."""
    return [r[0] for r in conn.execute(f"SELECT task_id FROM {queue.table}_started ORDER BY at")]


def insert_many(dsn: str, table: str, count: int, payload: str = "x", prefix: str = "k") -> None:
    """``count`` tasks (keys ``<prefix>0``...) inserted with ``insert_tasks`` in one commit."""
    import psycopg

    from nsj_queue_lib.queue_client import QueueClient

    with psycopg.connect(dsn) as conn:
        QueueClient(conn, table).insert_tasks(
            [
                dict(
                    origem="teste",
                    destino="worker",
                    processo="p",
                    chave_externa=f"{prefix}{i}",
                    payload=payload,
                )
                for i in range(count)
            ]
        )
        conn.commit()


def assert_rescued(conn, queue, task: int, key: str, rescuer: WorkerProcess) -> dict[str, Any]:
    """``rescuer`` marked the killed attempt of ``task`` falha_processando and ran the second.

    Returns the second attempt's row.
    """
    wait_for(
        lambda: statuses(conn, queue.table) == {"falha_processando": 1, "sucesso": 1},
        20,
        "the rescuer to mark the attempt falha_processando and run the next one",
    )
    first, second = fetch_rows(conn, queue.table)
    assert first["id"] == task and first["reenfileirado"] is True
    assert (second["tentativa"], second["id_inicial"], second["id_anterior"]) == (2, task, task)
    # The killed attempt's write was rolled back; the retry committed exactly once.
    assert exec_rows(conn, queue) == [(second["id"], key, rescuer.pid)]
    return second


def drain_exactly_once(
    dsn: str, conn, queue, batches: int, per_batch: int, timeout: float, payload: str = "{}"
) -> set:
    """Enqueue ``batches`` commits of ``per_batch`` tasks, wait until all succeeded, check each
    ran exactly once (one committed execution each); the pids of the processes that ran them."""
    total_tasks = batches * per_batch
    for batch in range(batches):  # one commit each: one notification each while workers drain
        insert_many(dsn, queue.table, per_batch, payload=payload, prefix=f"k{batch}-")
    wait_for(
        lambda: statuses(conn, queue.table) == {"sucesso": total_tasks},
        timeout,
        f"{total_tasks} tasks to succeed",
    )
    total, distinct, pids = conn.execute(
        f"SELECT count(*), count(DISTINCT task_id), array_agg(DISTINCT pid) FROM {queue.table}_exec"
    ).fetchone()
    assert (total, distinct) == (total_tasks, total_tasks)
    return set(pids)
