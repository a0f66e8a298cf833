"""Pause and resume (issue 43, CONTRACT.md section 8): with two real worker processes,
a paused queue (or processo) has nothing claimed while running tasks finish; ``resume``
and ``until`` restart claiming within the queue's wake-up bound. PostgreSQL (direct and
through the socket server) and MariaDB; SingleStore refuses clearly.
"""

from __future__ import annotations

import datetime
import json

import pytest

from tests.contract.backends import seconds
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)

WITH_PAUSE = pytest.mark.parametrize(
    "backend",
    ["postgres", "postgres-via-server", pytest.param("mysql", marks=pytest.mark.mysql)],
    indirect=True,
)
# How soon after a resume (or a pause's end) the first held task starts. The queue's
# wake-up: a NOTIFY at the resume's commit and the dispatcher's sleep planned to a
# pause's end on PostgreSQL; QUEUE_POLL_INTERVAL (0.1 s here) on MariaDB.
WAKE_UP_BOUND_S = 1.0


def two_workers(backend):
    procs = [
        backend.start_process(f"w{i}", wait_ready=False, QUEUE_CONCURRENCY="2") for i in range(2)
    ]
    backend.wait_processes_ready(procs)
    return procs


def stays(backend, condition, duration: float, what: str) -> None:
    """``condition`` holds at every look for ``duration`` seconds (the bound of the claim)."""
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=duration)
    while datetime.datetime.now() < deadline:
        assert condition(), what


def committed(backend, action):
    """Run ``action(client)`` in a committed transaction; the database's time after it."""
    with backend.transaction() as conn:
        result = action(backend.client(conn))
    return result, backend.now()


@WITH_PAUSE
def test_a_paused_queue_claims_nothing_running_tasks_finish_and_resume_restarts(backend):
    procs = two_workers(backend)
    running = backend.enqueue(
        [dict(payload=json.dumps({"sleep": 2.0, "started": True})) for _ in range(2)]
    )
    wait_for(lambda: len(backend.started_ids()) == 2, 10, "the two long tasks to start")
    _, paused_at = committed(backend, lambda c: c.pause())
    held = backend.enqueue([dict(payload=json.dumps({"started": True})) for _ in range(6)])
    # Running tasks finish under the pause; nothing new starts, in any worker.
    wait_for(
        lambda: all(backend.row(t)["status"] == "sucesso" for t in running),
        10,
        "the running tasks to finish",
    )
    stays(
        backend,
        lambda: backend.statuses() == {"sucesso": 2, "pendente": 6},
        1.5,
        "a task was claimed while the queue was paused",
    )
    with backend.transaction() as conn:
        assert backend.client(conn).paused() == [{"processo": None, "until": None}]
    was, resumed_at = committed(backend, lambda c: c.resume())
    assert was is True
    backend.wait_statuses({"sucesso": 8}, 15, "the held tasks after the resume")
    first_start = min(backend.row(t)["started_at"] for t in held)
    assert first_start >= paused_at
    assert seconds(first_start - resumed_at) < WAKE_UP_BOUND_S
    # Both workers were there to take them: the pause held the whole cluster.
    assert {r["pid"] for r in backend.exec_rows()} <= {p.proc.pid for p in procs}
    with backend.transaction() as conn:
        assert backend.client(conn).paused() == []


@WITH_PAUSE
def test_a_processo_paused_until_a_time_resumes_by_itself_and_others_run(backend):
    two_workers(backend)
    until = backend.now() + datetime.timedelta(seconds=2)
    committed(backend, lambda c: c.pause("lento", until=until))
    slow = backend.enqueue([dict(processo="lento") for _ in range(3)])
    quick = backend.enqueue([dict(processo="rapido") for _ in range(3)])
    wait_for(
        lambda: all(backend.row(t)["status"] == "sucesso" for t in quick),
        10,
        "the other processo's tasks to run during the pause",
    )
    # (Under load the quick ones may take longer than the pause: nothing of lento started
    # before its until is asserted below, on the database's clock.)
    with backend.transaction() as conn:
        listed = backend.client(conn).paused()
    if backend.now() < until - datetime.timedelta(seconds=0.5):
        assert all(backend.row(t)["status"] == "pendente" for t in slow)
        assert [p["processo"] for p in listed] == ["lento"]
        assert datetime.datetime.fromisoformat(listed[0]["until"]) == until
    wait_for(
        lambda: all(backend.row(t)["status"] == "sucesso" for t in slow),
        10,
        "the paused processo's tasks after its until",
    )
    starts = [backend.row(t)["started_at"] for t in slow]
    assert min(starts) >= until
    assert seconds(min(starts) - until) < WAKE_UP_BOUND_S
    with backend.transaction() as conn:
        assert backend.client(conn).paused() == []  # an expired pause is not listed


@pytest.mark.parametrize("backend", [pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True)
def test_pause_is_in_the_callers_transaction(backend):
    with backend.transaction() as conn:
        backend.client(conn).pause("p")
        conn.rollback()
    with backend.transaction() as conn:
        assert backend.client(conn).paused() == []
        with pytest.raises(ValueError, match="timezone-aware"):
            backend.client(conn).pause("p", until=datetime.datetime(2030, 1, 1))
        with pytest.raises(ValueError, match="non-empty string"):
            backend.client(conn).pause("  ")
