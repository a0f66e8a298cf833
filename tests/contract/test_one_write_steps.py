"""Durable steps and waits inside held commit groups (QUEUE_ONE_WRITE, PostgreSQL).

A held group's tasks are 'pendente' rows locked by its transaction. A step's commit in
the middle of the group must not free them: before its fence every held task of the
group is written 'processando' (db/postgres/held_session.py), and the group goes on as
a two-write group would. The same scenarios as test_durable_steps.py's group tests.
"""

from __future__ import annotations

import json

import pytest

from tests.contract.test_async_handlers import RETRY_BASE_MINUTES
from tests.contract.test_durable_steps import (
    STEPS_WORKER,
    checkpoints,
    committed,
    enqueue,
    rescue_after_kill_9,
    steps_worker,
)
from tests.helpers.processes import wait_for

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.parametrize("backend", ["postgres"], indirect=True),
]


def test_a_step_in_a_held_group_commits_the_groups_finished_tasks(backend):
    ids = backend.enqueue(
        [dict(processo="quick", chave_externa=f"q{i}", payload="{}") for i in range(3)]
        + [dict(processo="two_steps", chave_externa="s", payload="{}")]
        + [dict(processo="quick", chave_externa=f"r{i}", payload="{}") for i in range(3)]
    )
    running = backend.run(
        steps_worker(backend, queue_batch_size=20, queue_concurrency=1, queue_one_write=True)
    )
    backend.wait_statuses({"sucesso": 7}, 20, "the group to finish")
    assert running.stop() == 0
    assert committed(backend) == sorted(
        [f"q{i}-quick" for i in range(3)]
        + ["s-a", "s-b", "s-end"]
        + [f"r{i}-quick" for i in range(3)]
    )
    assert len(backend.rows()) == len(ids)
    assert set(checkpoints(backend, ids[3])) == {"a", "b"}


def test_a_retry_in_a_held_group_skips_the_finished_step(backend):
    task_id = enqueue(backend, "two_steps", "k", fail_after_a=[1])
    running = backend.run(
        steps_worker(
            backend,
            queue_batch_size=20,
            queue_one_write=True,
            queue_base_interval_retry=RETRY_BASE_MINUTES,
        )
    )
    backend.wait_statuses({"falha": 1, "sucesso": 1}, 20, "the failure and the retry")
    assert running.stop() == 0
    assert committed(backend) == ["k-a", "k-b", "k-end"]
    assert [r["task_id"] for r in backend.exec_rows() if r["chave"] == "k-a"] == [task_id]


def test_kill_9_after_a_step_in_a_held_group_keeps_what_committed_with_it(backend):
    """The step's commit wrote the group's held tasks 'processando' with it: q0..q2 are
    'sucesso', the running task and r0, r1 'processando'; after kill -9 they are rescued
    as a two-write group's would be, and nothing committed runs again."""
    ids = backend.enqueue(
        [dict(processo="quick", chave_externa=f"q{i}", payload="{}") for i in range(3)]
        + [dict(processo="two_steps", chave_externa="s", payload=json.dumps({"hang": True}))]
        + [dict(processo="quick", chave_externa=f"r{i}", payload="{}") for i in range(2)]
    )
    victim = backend.start_process(
        "victim",
        script=STEPS_WORKER,
        QUEUE_BATCH_SIZE="10",
        QUEUE_BATCH_MAX_MS="60000",
        QUEUE_CONCURRENCY="1",
        QUEUE_ONE_WRITE="true",
    )
    wait_for(lambda: "s-a" in committed(backend), 15, "step a to commit in the victim")
    assert [backend.row(i)["status"] for i in ids] == ["sucesso"] * 3 + ["processando"] * 3
    rescue_after_kill_9(backend, victim, rescued=3, succeeded=6)
    assert committed(backend) == sorted(
        ["q0-quick", "q1-quick", "q2-quick", "s-a", "s-b", "s-end", "r0-quick", "r1-quick"]
    )
    assert [r["task_id"] for r in backend.exec_rows() if r["chave"] == "s-a"] == [ids[3]]


@pytest.fixture
def held_waits(monkeypatch):
    """test_durable_waits.py's scenarios, their workers holding their groups' tasks."""
    from tests.contract import test_durable_waits as waits

    def held_worker(backend, slots="threads", **changes):
        return steps_worker(backend, slots, queue_one_write=True, **changes)

    monkeypatch.setattr(waits, "steps_worker", held_worker)
    return waits


def test_a_sleeping_task_in_a_held_group_frees_its_executor_and_resumes(backend, held_waits):
    held_waits.test_a_sleeping_task_frees_its_executor_and_resumes(backend, 20, "threads")


def test_a_waiting_task_in_a_held_group_is_woken_by_send_event(backend, held_waits):
    held_waits.test_wait_event_is_woken_by_send_event_from_another_transaction(
        backend, 20, "threads"
    )
