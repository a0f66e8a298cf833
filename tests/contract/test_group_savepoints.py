"""Group commit with handlers that never use ``bd_conn`` next to handlers that write.

A handler's savepoint is set only when it sends its first statement
(db/postgres/first_use.py, db/mysql/first_use.py): a handler that sends none
has nothing to roll back. Failure isolation must be exactly as with a savepoint before
every handler, on both databases.
"""

from __future__ import annotations

from collections import Counter

import psycopg
import pymysql
import pytest

from nsj_queue_lib.db.mysql import driver as mysql_driver
from nsj_queue_lib.db.mysql import first_use as mysql_first_use
from nsj_queue_lib.db.postgres import driver as postgres_driver
from nsj_queue_lib.db.postgres import first_use
from nsj_queue_lib.db.postgres.driver import HandlerConnection
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


class HookNeverRuns(HandlerConnection):
    """As if a psycopg release had renamed the methods first_use.py wraps: psycopg's own
    run, the hook's never."""

    def _start_query(self, *args, **kwargs):
        return (yield from psycopg.Connection._start_query(self, *args, **kwargs))

    def _exec_command(self, *args, **kwargs):
        return (yield from psycopg.Connection._exec_command(self, *args, **kwargs))

    def pipeline(self):
        return psycopg.Connection.pipeline(self)

    def _pipeline_nolock(self):
        return psycopg.Connection._pipeline_nolock(self)


class MysqlHookNeverRuns(mysql_driver.HandlerConnection):
    """As if a PyMySQL release had renamed the method first_use.py wraps."""

    def _execute_command(self, command, sql):
        return pymysql.connections.Connection._execute_command(self, command, sql)


@pytest.mark.parametrize(
    "backend", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True
)
def test_where_the_driver_no_longer_runs_the_hook_each_savepoint_is_set_before_its_handler(
    backend, monkeypatch
):
    if backend.kind == "mysql":
        never_runs, checked = MysqlHookNeverRuns, mysql_first_use._check.checked
        monkeypatch.setattr(mysql_driver, "HandlerConnection", MysqlHookNeverRuns)
    else:
        never_runs, checked = HookNeverRuns, first_use._check.checked
        monkeypatch.setattr(postgres_driver, "HandlerConnection", HookNeverRuns)

    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)
        if payload == "write fails" and tarefa["tentativa"] == 1:
            raise RuntimeError("planned failure")
        return "ok"

    ids = backend.enqueue([dict(payload=p) for p in ["write", "write fails", "write"]])
    worker = backend.run(backend.function_worker(execute, **GROUP))
    backend.wait_statuses({"sucesso": 3, "falha": 1}, 20, "the group and the retry")
    # The failure rolled back its own write only (its retry wrote once); its neighbours'
    # writes committed.
    assert chains(backend) == Counter({task_id: 1 for task_id in ids})
    assert checked[never_runs] is False  # the self-check saw it
    assert worker.stop() == 0
