"""Operating a worker, on PostgreSQL and MariaDB: a refused login stops it at start, a
handler that ends the task's transaction is told so.

- The database refusing the worker's user or password, or not knowing its
  database (PostgreSQL 28000/28P01/3D000, MySQL 1044/1045/1049), is
  configuration: the process exits with code 2 at once and its last stderr
  line names the cause and the variables to check. An outage (nothing
  listening) is retried with back-off as before.
- ``execute`` runs in the task's transaction, which the worker commits: a
  handler that commits or rolls back ``bd_conn`` has its attempt failed with
  a message that says so (not the driver's "COMMIT AND CHAIN can only be used
  in transaction blocks", nor, on MySQL, a silent success).
"""

from __future__ import annotations

import logging
import time

import pytest

from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(60)

EXIT_CONFIG_ERROR = 2
DIRECT = [
    pytest.param("postgres", id="postgres"),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]
# (variable, value, what the last stderr line names), per database family.
REFUSALS = {
    "postgres": {
        "database": ("DB_BASE", "nsjq_no_such_db", 'database "nsjq_no_such_db" does not exist'),
        "user": ("DB_USER", "nsjq_no_such_user", 'role "nsjq_no_such_user" does not exist'),
    },
    "mysql": {
        "database": ("DB_BASE", "nsjq_no_such_db", "Unknown database 'nsjq_no_such_db'"),
        "user": ("DB_USER", "nsjq_no_such_user", "Access denied for user 'nsjq_no_such_user'"),
    },
}


@pytest.mark.parametrize("cause", ["database", "user"])
@pytest.mark.parametrize("backend", DIRECT, indirect=True)
def test_a_refused_login_stops_the_worker_process_at_start_with_exit_code_2(backend, cause):
    variable, value, named = REFUSALS[backend.family][cause]
    started = time.monotonic()
    worker = backend.start_process("refused-login", wait_ready=False, **{variable: value})
    code = worker.wait(30)
    last = worker.last_line()
    assert code == EXIT_CONFIG_ERROR, worker.output()[-3000:]
    assert last.startswith("nsj_queue_lib: connecting to "), last
    assert named in last and "(check " in last and variable in last.split("(check ")[-1], last
    assert "retrying" not in worker.output(), worker.output()[-3000:]
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("backend", DIRECT, indirect=True)
def test_an_unreachable_database_at_start_is_still_retried(backend, caplog):
    caplog.set_level(logging.WARNING, logger="nsj_queue_lib")
    running = backend.run(backend.function_worker(lambda *a: None, db_port=1), wait_ready=False)
    wait_for(
        lambda: any("database unavailable at start" in r.getMessage() for r in caplog.records),
        15,
        "the worker to report the outage",
    )
    time.sleep(0.5)
    assert running.alive()
    assert running.stop() == 0


def _ends_its_transaction(how: str):
    def execute(payload, tarefa, bd_conn):
        getattr(bd_conn, how)()
        return "done"

    return execute


@pytest.mark.parametrize("how", ["commit", "rollback"])
@pytest.mark.parametrize("backend", DIRECT, indirect=True)
def test_a_handler_that_ends_the_tasks_transaction_is_told_so(backend, how, caplog):
    caplog.set_level(logging.WARNING, logger="nsj_queue_lib")
    backend.run(backend.function_worker(_ends_its_transaction(how), queue_max_retry=2))
    [task] = backend.enqueue([dict(payload="ends it")])
    wait_for(lambda: backend.row(task)["status"] == "falha", 15, "the attempt to fail")
    mensagem = backend.row(task)["mensagem"]
    assert mensagem.startswith(
        "HandlerTransactionError: the handler committed or rolled back bd_conn; "
        "the worker commits the task's transaction itself"
    ), mensagem
    assert "COMMIT AND CHAIN" not in mensagem
    failures = [r for r in caplog.records if "attempt 1 of 2 failed" in r.getMessage()]
    assert len(failures) == 1 and "committed or rolled back bd_conn" in failures[0].getMessage()
