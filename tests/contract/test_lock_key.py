"""lock_key (CONTRACT.md section 7, docs/flow-control.md) with several worker processes,
on PostgreSQL (direct and through the socket server) and MariaDB.

Tasks of one key never overlap and start in claim order; tasks of other keys and
tasks without a key keep running meanwhile; the key of a worker killed mid-task
is freed by another worker's retry service, and nothing runs twice.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from tests.contract.backends import seconds
from tests.contract.test_contract import RETRY_BASE_MINUTES
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(90)

LOCK_BACKENDS = pytest.mark.parametrize(
    "backend",
    ["postgres", "postgres-via-server", pytest.param("mysql", marks=pytest.mark.mysql)],
    indirect=True,
)
SLEEP = 0.15


def executions_by_key(backend) -> dict[str, list[dict]]:
    """Committed executions per lock_key, in start order, with their task rows."""
    rows = {r["id"]: r for r in backend.rows()}
    by_key: dict[str, list[dict]] = defaultdict(list)
    for ex in backend.query(f"SELECT task_id, at FROM {backend.exec_table} ORDER BY at"):
        task = rows[ex["task_id"]]
        by_key[task["lock_key"]].append(
            {"at": ex["at"], **{k: task[k] for k in ("id", "id_inicial")}}
        )
    return by_key


def assert_serial(executions: list[dict]) -> None:
    """Each execution of one key starts after the previous one's handler slept SLEEP."""
    for before, after in zip(executions, executions[1:], strict=False):
        assert seconds(after["at"] - before["at"]) >= SLEEP * 0.9, (before, after)


@LOCK_BACKENDS
def test_tasks_of_a_key_never_overlap_and_start_in_claim_order(backend):
    procs = [
        backend.start_process(f"w{i}", wait_ready=False, QUEUE_CONCURRENCY="3") for i in range(2)
    ]
    backend.wait_processes_ready(procs)
    payload = json.dumps({"sleep": SLEEP})
    tasks = [
        dict(lock_key=f"k{i % 3}", payload=payload, chave_externa=f"k{i % 3}") for i in range(12)
    ]
    tasks += [dict(payload=payload, chave_externa="free") for _ in range(4)]
    ids = backend.enqueue(tasks, bulk=True)
    backend.wait_statuses({"sucesso": 16}, 30, "every task to run")
    by_key = executions_by_key(backend)
    for key in ("k0", "k1", "k2"):
        assert [e["id"] for e in by_key[key]] == [
            i for i, t in zip(ids, tasks, strict=True) if t.get("lock_key") == key
        ]
        assert_serial(by_key[key])
    # Keys ran side by side: the whole drain took far less than running 12 tasks in a row.
    starts = [e["at"] for ex in by_key.values() for e in ex]
    assert seconds(max(starts) - min(starts)) < 12 * SLEEP
    # Unkeyed tasks did not wait for the keys.
    assert len(by_key[None]) == 4


@LOCK_BACKENDS
@pytest.mark.slow
def test_the_key_of_a_killed_worker_is_freed_by_the_rescue_and_nothing_runs_twice(backend):
    victim = backend.start_process("victim")
    hold = json.dumps({"sleep": 60, "sleep_on": [1], "started": True})
    [held] = backend.enqueue([dict(lock_key="k", payload=hold, chave_externa="held")])
    wait_for(lambda: backend.started_ids() == [held], 15, "the victim to start the keyed task")
    waiting = backend.enqueue(
        [dict(lock_key="k", payload=json.dumps({"started": True}), chave_externa="next")] * 2
        + [dict(payload=json.dumps({"started": True}), chave_externa="free")]
    )
    rescuer = backend.run(
        backend.contract_worker(
            queue_retry_thread_interval=0.3,
            queue_base_interval_retry=RETRY_BASE_MINUTES,
            queue_concurrency=3,
        )
    )
    # The unkeyed task runs; the keyed ones wait for the victim's task, holding no executor.
    wait_for(lambda: waiting[2] in backend.started_ids(), 10, "the unkeyed task to run")
    assert backend.started_ids() == [held, waiting[2]]
    victim.kill9()
    wait_for(
        lambda: backend.statuses().get("sucesso") == 4,
        20,
        "the rescue, the retry and the key's tasks",
    )
    assert backend.statuses() == {"falha_processando": 1, "sucesso": 4}
    by_key = executions_by_key(backend)
    # Each task committed once; the killed attempt's write died with it.
    assert sorted(e["id_inicial"] or e["id"] for e in by_key["k"]) == sorted([held, *waiting[:2]])
    assert rescuer.stop() == 0
