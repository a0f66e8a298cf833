"""Group commit (docs/group-commit.md) when writing a failure fails: a deadlock between
two executors' groups on MySQL ends the group's whole transaction under it."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from nsj_queue_lib.db.task_session import TaskSession
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.runtime.group_recovery import GroupRecovery
from tests.contract.test_group_commit import BOTH, GROUP, chains, write_exec
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)


@BOTH
def test_a_failure_whose_record_fails_is_recorded_at_once_on_a_fresh_connection(
    backend, monkeypatch
):
    record = TaskSession.record_failure
    refused = []

    def deadlocked_once(self, conn, task, settled):
        if not refused:
            refused.append(task.id)
            # What MySQL does to a deadlock's victim: its whole transaction is gone.
            self.store.rollback(conn)
            raise DatabaseError("Deadlock found when trying to get lock (injected)")
        record(self, conn, task, settled)

    monkeypatch.setattr(TaskSession, "record_failure", deadlocked_once)

    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)
        if payload == "fails" and tarefa["tentativa"] == 1:
            raise RuntimeError("planned failure")
        return "ok"

    ids = backend.enqueue([dict(payload=p) for p in ["ok", "fails", "ok", "ok"]])
    worker = backend.run(backend.function_worker(execute, **GROUP))
    # Not left 'processando' for the retry service's rescue (an hour in these tests).
    backend.wait_statuses({"sucesso": 4, "falha": 1}, 20, "the group and the retry")
    assert refused == [ids[1]]
    assert "planned failure" in backend.row(ids[1])["mensagem"]
    # The first task's success was lost with the transaction: it ran again, committed once.
    assert set(chains(backend).values()) == {1}
    assert worker.alive() and worker.stop() == 0


@BOTH
def test_tasks_a_lost_group_cannot_give_back_on_its_connection_are_rescued(backend, monkeypatch):
    give_back = GroupRecovery.give_back
    refused = []

    def refused_on_its_own_connection(self, tasks, failures, conn, committed, saves=None):
        if conn is None:  # a fresh connection
            return give_back(self, tasks, failures, conn, committed, saves)
        # Every try failed (a lock wait timeout, say) while the connection stays alive.
        refused.append(sorted(task.id for task, _ in tasks))
        self.session.store.rollback(conn)
        return False

    monkeypatch.setattr(GroupRecovery, "give_back", refused_on_its_own_connection)
    release = threading.Event()

    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)
        if payload == "rolls back" and tarefa["tentativa"] == 1:
            bd_conn.rollback()  # ends the group's transaction: the two before it are lost
        if payload == "busy":
            release.wait(30)  # keeps the worker's connection in a transaction
        return "ok"

    payloads = ["ok", "ok", "rolls back", "ok", "busy"]
    ids = backend.enqueue([dict(payload=p) for p in payloads])
    worker = backend.run(backend.function_worker(execute, queue_retry_thread_interval=0.3, **GROUP))
    # The connection holding the lost tasks' liveness locks was closed: the retry service
    # rescues them while the worker goes on. (Kept, the connection held them 'processando'
    # as long as it stayed in a transaction: on a busy worker, indefinitely.)
    try:
        wait_for(
            lambda: [backend.row(i)["status"] for i in ids[:2]] == ["falha_processando"] * 2,
            20,
            "the lost tasks rescued while the worker is busy",
        )
    finally:
        release.set()
    # The offender's failure is recorded, then its retry succeeds; the unstarted ones go
    # back from a fresh connection (or, their locks gone with the closed one, the retry
    # service rescues them first: either way each runs once more).
    wait_for(
        lambda: (
            backend.statuses().get("sucesso") == 5
            and set(backend.statuses()) <= {"sucesso", "falha", "falha_processando"}
        ),
        20,
        "every task",
    )
    assert backend.statuses()["falha"] == 1
    assert refused == [ids[:2]]
    assert "committed or rolled back bd_conn" in backend.row(ids[2])["mensagem"]
    # Nothing committed twice, nothing lost: the lost tasks' writes were rolled back.
    assert chains(backend) == Counter({task_id: 1 for task_id in ids})
    assert worker.alive() and worker.stop() == 0
