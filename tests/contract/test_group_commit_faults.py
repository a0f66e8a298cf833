"""Group commit (docs/group-commit.md) when writing a failure fails: a deadlock between
two executors' groups on MySQL ends the group's whole transaction under it."""

from __future__ import annotations

import pytest

from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.runtime.group_commit import GroupDrain
from tests.contract.test_group_commit import BOTH, GROUP, chains, write_exec

pytestmark = pytest.mark.timeout(120)


@BOTH
def test_a_failure_whose_record_fails_is_recorded_at_once_on_a_fresh_connection(
    backend, monkeypatch
):
    settle = GroupDrain._settle_failure
    refused = []

    def deadlocked_once(self, conn, task, how):
        if not refused:
            refused.append(task.id)
            # What MySQL does to a deadlock's victim: its whole transaction is gone.
            self.ex.store.rollback(conn)
            raise DatabaseError("Deadlock found when trying to get lock (injected)")
        settle(self, conn, task, how)

    monkeypatch.setattr(GroupDrain, "_settle_failure", deadlocked_once)

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
