"""Group commit with handlers that never use ``bd_conn`` next to handlers that write.

On PostgreSQL a handler's savepoint is set only when it sends its first
statement (db/postgres/first_use.py): a handler that sends none has nothing
to roll back. Failure isolation must be exactly as with a savepoint before
every handler, on both databases.
"""

from __future__ import annotations

from collections import Counter

from tests.contract.test_group_commit import BOTH, GROUP, chains, write_exec


@BOTH
def test_quiet_handlers_between_writers_keep_every_failure_alone(backend):
    runs: Counter = Counter()

    def execute(payload, tarefa, bd_conn):
        runs[tarefa["id"]] += 1
        first = tarefa["tentativa"] == 1
        if payload.startswith("write"):
            write_exec(backend, bd_conn, tarefa)
        if first and payload.endswith("fails"):
            raise RuntimeError("planned failure")
        if first and payload == "commits":
            bd_conn.commit()  # its first use of bd_conn
        return "ok"

    payloads = ["write", "quiet", "quiet fails", "quiet", "write fails", "write", "quiet"]
    payloads.append("commits")
    ids = backend.enqueue([dict(payload=p) for p in payloads])
    worker = backend.run(backend.function_worker(execute, **GROUP))
    backend.wait_statuses({"sucesso": 8, "falha": 3}, 20, "the group and the three retries")
    assert "planned failure" in backend.row(ids[2])["mensagem"]
    assert "committed or rolled back bd_conn" in backend.row(ids[7])["mensagem"]
    # A quiet failure rolled back nothing of the writer before it; a writer's failure only
    # its own write (its retry wrote once); the commit kept the tasks before it, which did
    # not run again.
    assert chains(backend) == Counter({ids[0]: 1, ids[4]: 1, ids[5]: 1})
    assert all(runs[task_id] == 1 for task_id in ids), runs
    assert worker.stop() == 0
