"""Durable steps (issue 41 item 4; CONTRACT.md section 8) on PostgreSQL and MariaDB.

``current_task().step(name, fn, *args)`` runs ``fn`` once per task: its writes on
``bd_conn`` and its JSON result commit together when the step returns, so a retry
(after a failure, or a worker killed with kill -9 between two steps) skips the
finished step and finds its writes exactly once. Inside a commit group, a step
commits the group's finished tasks with it. ``@Task(durable_steps=True)`` makes each
``yield`` of a generator handler such a step. Worker processes where kill -9 is the
point, in-process workers elsewhere (``workers/steps_worker.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsj_queue_lib.runtime.retry import ORPHAN_MESSAGE
from tests.contract.test_async_handlers import BOTH, RETRY_BASE_MINUTES
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)

STEPS_WORKER = Path(__file__).resolve().parent / "workers" / "steps_worker.py"
# The liveness lock in the database, or on the socket server (one commit per task there).
WITH_SERVER = pytest.mark.parametrize(
    "backend",
    ["postgres", "postgres-via-server", pytest.param("mysql", marks=pytest.mark.mysql)],
    indirect=True,
)
BATCHES = pytest.mark.parametrize(
    ("batch", "slots"),
    [(1, "threads"), (20, "threads"), (1, "async")],
    ids=["one-commit-per-task", "group-commit", "async-slots"],
)


def steps_worker(backend, slots="threads", **changes):
    """An in-process steps worker; ``slots="async"``: one with an async handler too, whose
    sync handlers run in the async slots' threads."""
    from tests.contract.workers import steps_worker as module

    kind = module.AsyncStepsContractWorker if slots == "async" else module.StepsContractWorker
    return kind(
        backend.settings(**changes),
        exec_table=backend.exec_table,
        started_table=backend.started_table,
        ready_file="",
    )


def committed(backend) -> list[str]:
    return sorted(r["chave"] for r in backend.exec_rows())


def checkpoints(backend, task_id) -> dict[str, dict]:
    rows = backend.query(
        f"SELECT name, result, attempt_id FROM {backend.table}_steps WHERE task_id = %s",
        (task_id,),
    )
    return {
        r["name"]: {"result": json.loads(r["result"]), "attempt": r["attempt_id"]} for r in rows
    }


def rescue_after_kill_9(backend, victim, rescued=1, succeeded=1) -> None:
    """The retry service finds nothing to rescue while the victim lives (its step's commit
    kept its tasks' liveness locks); then kill the victim: an in-process worker rescues its
    tasks and runs the retries."""
    from nsj_queue_lib.runtime.retry import RetryService
    from tests.helpers import services

    assert not services.make_service(RetryService, backend.settings()).run_once()
    victim.kill9()
    rescuer = backend.run(
        steps_worker(
            backend, queue_retry_thread_interval=0.3, queue_base_interval_retry=RETRY_BASE_MINUTES
        )
    )
    backend.wait_statuses(
        {"falha_processando": rescued, "sucesso": succeeded}, 20, "the rescue and the retries"
    )
    assert rescuer.stop() == 0


def enqueue(backend, processo, chave, **spec):
    [task_id] = backend.enqueue(
        [dict(processo=processo, chave_externa=chave, payload=json.dumps(spec))]
    )
    return task_id


@WITH_SERVER
@BATCHES
def test_a_retry_skips_the_finished_step_whose_writes_committed_once(backend, batch, slots):
    """Attempt 1 fails after step "a": a's write and checkpoint stay committed (the
    failure rolls back only what followed); attempt 2 gets a's stored result without
    running it, runs "b", and succeeds."""
    task_id = enqueue(backend, "two_steps", "k", fail_after_a=[1])
    running = backend.run(
        steps_worker(
            backend, slots, queue_batch_size=batch, queue_base_interval_retry=RETRY_BASE_MINUTES
        )
    )
    backend.wait_statuses({"falha": 1, "sucesso": 1}, 20, "the failure and the retry")
    assert running.stop() == 0
    [retry] = backend.rows("id_anterior = %s", (task_id,))
    assert committed(backend) == ["k-a", "k-b", "k-end"]
    assert [r["task_id"] for r in backend.exec_rows() if r["chave"] == "k-a"] == [task_id]
    a = {"step": "a", "attempt": 1}
    b = {"step": "b", "attempt": 2}
    assert json.loads(retry["mensagem"]) == [a, b]  # a's result as attempt 1 stored it
    assert checkpoints(backend, task_id) == {
        "a": {"result": a, "attempt": task_id},
        "b": {"result": b, "attempt": retry["id"]},
    }


@BOTH
def test_kill_9_between_two_steps_the_retry_skips_the_first(backend):
    """A worker process killed between steps "a" and "b": a's write was visible to other
    sessions before the kill (committed when the step returned); the rescued retry skips
    "a" and the task's rows exist once each."""
    victim = backend.start_process("victim", script=STEPS_WORKER)
    task_id = enqueue(backend, "two_steps", "k", hang=True)
    wait_for(lambda: committed(backend) == ["k-a"], 15, "step a to commit in the victim")
    assert backend.row(task_id)["status"] == "processando"  # still its own, mid-handler
    rescue_after_kill_9(backend, victim)
    assert ORPHAN_MESSAGE in backend.row(task_id)["mensagem"]
    [retry] = backend.rows("id_anterior = %s", (task_id,))
    assert [(r["task_id"], r["chave"]) for r in backend.exec_rows()] == [
        (task_id, "k-a"),
        (retry["id"], "k-b"),
        (retry["id"], "k-end"),
    ]


@BOTH
def test_a_step_inside_a_commit_group_commits_the_groups_finished_tasks(backend):
    """Group commit: quick tasks finished before a task's step commit with that step (their
    'sucesso' with their writes); the group goes on, and every task ends 'sucesso' once."""
    ids = backend.enqueue(
        [dict(processo="quick", chave_externa=f"q{i}", payload="{}") for i in range(3)]
        + [dict(processo="two_steps", chave_externa="s", payload="{}")]
        + [dict(processo="quick", chave_externa=f"r{i}", payload="{}") for i in range(3)]
    )
    running = backend.run(steps_worker(backend, queue_batch_size=20, queue_concurrency=1))
    backend.wait_statuses({"sucesso": 7}, 20, "the group to finish")
    assert running.stop() == 0
    assert committed(backend) == sorted(
        [f"q{i}-quick" for i in range(3)]
        + ["s-a", "s-b", "s-end"]
        + [f"r{i}-quick" for i in range(3)]
    )
    assert len(backend.rows()) == len(ids)  # no retry anywhere
    assert set(checkpoints(backend, ids[3])) == {"a", "b"}


@BOTH
def test_kill_9_after_a_step_inside_a_commit_group_keeps_the_tasks_committed_with_it(backend):
    """A group (never committed early: QUEUE_BATCH_MAX_MS of a minute) runs q0..q2, then the
    task whose step "a" commits: q0..q2 are 'sucesso' with it, while the group's unstarted
    r0, r1 stay claimed. kill -9 then: q0..q2 never run again, "a" is skipped by the retry,
    and r0, r1 are rescued and run once."""
    kill_9_after_a_step_inside_a_group(backend)


def kill_9_after_a_step_inside_a_group(backend, **env: str) -> None:
    """The scenario above, the victim's environment plus ``env``."""
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
        **env,
    )
    wait_for(lambda: "s-a" in committed(backend), 15, "step a to commit in the victim")
    assert [backend.row(i)["status"] for i in ids] == ["sucesso"] * 3 + ["processando"] * 3
    assert committed(backend) == ["q0-quick", "q1-quick", "q2-quick", "s-a"]
    rescue_after_kill_9(backend, victim, rescued=3, succeeded=6)
    assert committed(backend) == sorted(
        ["q0-quick", "q1-quick", "q2-quick", "s-a", "s-b", "s-end", "r0-quick", "r1-quick"]
    )
    assert [r["task_id"] for r in backend.exec_rows() if r["chave"] == "s-a"] == [ids[3]]


@BOTH
def test_a_durable_pipeline_commits_each_yield_and_a_retry_resumes_after_them(backend):
    """``@Task(durable_steps=True)``: kill -9 before the 2nd yield of attempt 1; its 1st
    yield's write stays, committed; the retry sees ``durable_yields == 1``, writes 2 and 3."""
    victim = backend.start_process("victim", script=STEPS_WORKER)
    task_id = enqueue(backend, "yields", "y", hang_at=2)
    wait_for(lambda: committed(backend) == ["y-1"], 15, "the first yield to commit")
    rescue_after_kill_9(backend, victim)
    assert committed(backend) == ["y-1", "y-2", "y-3"]
    assert set(checkpoints(backend, task_id)) == {"yield:1", "yield:2", "yield:3"}
    assert checkpoints(backend, task_id)["yield:1"]["result"] == [1, 3, "step 1"]


@BOTH
def test_the_purge_deletes_a_purged_tasks_checkpoints_and_events(backend):
    """A finished task old enough to purge loses its checkpoints and events with its rows;
    a recent task keeps them."""
    from nsj_queue_lib.runtime.purge import PurgeService
    from tests.helpers import services

    old, recent = enqueue(backend, "two_steps", "o"), enqueue(backend, "two_steps", "r")
    running = backend.run(steps_worker(backend))
    backend.wait_statuses({"sucesso": 2}, 20, "both tasks to run")
    assert running.stop() == 0
    for task_id in (old, recent):
        with backend.transaction() as conn:
            backend.client(conn).send_event(task_id, "late")
    backend.execute(
        f"UPDATE {backend.table} SET data_hora = data_hora - INTERVAL '3' DAY WHERE id = %s",
        (old,),
    )
    service = services.make_service(PurgeService, backend.settings(queue_purge_max_age=1))
    assert service.run_once() == 1
    assert [r["id"] for r in backend.rows()] == [recent]
    assert set(checkpoints(backend, old)) == set()
    assert set(checkpoints(backend, recent)) == {"a", "b"}
    events = backend.query(f"SELECT task_id FROM {backend.table}_events")
    assert [e["task_id"] for e in events] == [recent]


@BOTH
def test_a_queue_without_the_checkpoint_tables_says_so_until_db_gen_upgrade(backend):
    """A queue made before durable steps: a step fails its attempt with a message naming
    ``db_gen --upgrade`` (nothing of it kept) and send_event is refused; the upgrade adds
    the tables and the task's retry then runs its steps."""
    from nsj_queue_lib.db_gen import render
    from nsj_queue_lib.exceptions import WorkflowUnsupported
    from tests.helpers.mysql_queue import execute_script

    backend.execute(f"DROP TABLE {backend.table}_steps")
    backend.execute(f"DROP TABLE {backend.table}_events")
    task_id = enqueue(backend, "two_steps", "k")
    with pytest.raises(WorkflowUnsupported, match="db_gen --upgrade"):
        with backend.transaction() as conn:
            backend.client(conn).send_event(task_id, "go")
    # The retry 3 s after the failure: after the upgrade below.
    running = backend.run(steps_worker(backend, queue_base_interval_retry=3 / 60))
    wait_for(lambda: backend.row(task_id)["status"] == "falha", 15, "the step to fail")
    assert "db_gen --upgrade" in backend.row(task_id)["mensagem"]
    assert committed(backend) == []
    if backend.family == "postgres":
        backend.admin.execute(render(backend.schema, backend.name, upgrade=True))
    else:
        execute_script(backend.admin, render(backend.schema, backend.name, "mysql", upgrade=True))
    backend.wait_statuses({"falha": 1, "sucesso": 1}, 20, "the retry after the upgrade")
    assert running.stop() == 0
    assert committed(backend) == ["k-a", "k-b", "k-end"]


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["singlestore-via-server"], indirect=True)
def test_singlestore_refuses_steps_and_events_clearly(backend):
    """The client (on MySQL's driver) finds no checkpoint tables; the worker knows its
    dialect: the step fails its attempt saying what needs what."""
    from nsj_queue_lib.exceptions import WorkflowUnsupported

    task_id = enqueue(backend, "two_steps", "k")
    with pytest.raises(WorkflowUnsupported, match="SingleStore has no workflows"):
        with backend.transaction() as conn:
            backend.client(conn).send_event(task_id, "go")
    running = backend.run(steps_worker(backend, queue_base_interval_retry=1))
    wait_for(lambda: backend.row(task_id)["status"] == "falha", 15, "the step to fail")
    assert running.stop() == 0
    assert (
        "durable steps and waits (step, sleep, wait_event, send_event) need PostgreSQL"
        in (backend.row(task_id)["mensagem"])
    )
    assert committed(backend) == []
