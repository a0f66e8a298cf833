"""A lost database connection under a running handler costs no back-off, on every backend.

The worker's own connection to the task is ended by the server (PostgreSQL
``pg_terminate_backend``, MySQL ``KILL CONNECTION``: what an admin shutdown or
a failover does to a session) while the handler runs. The attempt is settled
like a shutdown release: 'falha_processando', and its next attempt is due at
once, not after QUEUE_BASE_INTERVAL_RETRY; the next attempt then succeeds.
A handler's own error, even a database driver's error from a connection of
its own, stays a normal failure with its back-off.
"""

from __future__ import annotations

import logging
import threading

import pytest

from tests.contract.backends import seconds
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(60)


def _session_id(backend, bd_conn) -> int:
    return bd_conn.info.backend_pid if backend.family == "postgres" else bd_conn.thread_id()


def _kill_session(backend, session: int) -> None:
    if backend.family == "postgres":
        backend.execute("SELECT pg_terminate_backend(%s)", (session,))
    else:
        backend.execute("KILL CONNECTION %s", (session,))


def test_a_connection_lost_under_the_handler_is_released_for_an_attempt_due_at_once(backend):
    sessions: list[int] = []
    started = threading.Event()
    killed = threading.Event()

    def execute(payload, tarefa, bd_conn):
        if tarefa["tentativa"] == 1:
            sessions.append(_session_id(backend, bd_conn))
            started.set()
            assert killed.wait(10)
            with bd_conn.cursor() as cur:  # the session is gone: this raises
                cur.execute("SELECT 1")
        return "second attempt"

    backend.run(backend.function_worker(execute, queue_base_interval_retry=10))
    [task] = backend.enqueue([dict(payload="lost")])
    assert started.wait(15), "the handler did not start"
    _kill_session(backend, sessions[0])
    killed.set()
    assert_released_at_once(backend, task)


def assert_released_at_once(backend, task: int) -> None:
    """``task``'s attempt was released ('falha_processando', its connection lost) and its
    next attempt, due at once, succeeded."""
    wait_for(lambda: len(backend.rows()) == 2, 15, "the next attempt to be enqueued")
    first, second = backend.rows()
    assert first["id"] == task and first["status"] == "falha_processando", first
    assert "connection was lost" in first["mensagem"], first["mensagem"]
    # Due at once: well before the 10-minute back-off of a handler failure.
    assert seconds(second["data_hora"] - first["data_hora"]) < 60, (first, second)
    wait_for(lambda: backend.row(second["id"])["status"] == "sucesso", 15, "the retry to succeed")


def test_a_handlers_own_driver_error_stays_a_failure_with_its_back_off(backend):
    def execute(payload, tarefa, bd_conn):
        other = backend.connect()
        other.close()
        with other.cursor() as cur:  # the handler's own closed connection: its error
            cur.execute("SELECT 1")

    backend.run(backend.function_worker(execute, queue_base_interval_retry=10))
    [task] = backend.enqueue([dict(payload="own error")])
    wait_for(lambda: len(backend.rows()) == 2, 15, "the next attempt to be enqueued")
    first, second = backend.rows()
    assert first["status"] == "falha", first
    assert seconds(second["data_hora"] - first["data_hora"]) > 500, (first, second)


@pytest.mark.parametrize("backend", [pytest.param("postgres", id="postgres")], indirect=True)
def test_the_start_up_line_shows_the_connection_with_its_password_masked(backend, caplog):
    caplog.set_level(logging.INFO, logger="nsj_queue_lib")
    # The shared test server trusts local connections: any password is accepted.
    backend.run(backend.function_worker(lambda *a: None, db_pass="hunter2", db_sslmode="prefer"))
    [line] = [r.getMessage() for r in caplog.records if "worker starting" in r.getMessage()]
    db = backend.db
    if db["host"].startswith("/"):
        # A unix socket (the embedded PostgreSQL): its directory plainly, in libpq's host=.
        assert f"database postgresql://{db['user']}:***@/{db['name']}?" in line, line
        assert f"host={db['host']}&port={db['port']}&" in line, line
    else:
        assert f"database postgresql://{db['user']}:***@{db['host']}:{db['port']}/" in line, line
    assert "sslmode=prefer" in line, line
    assert not [r for r in caplog.records if "hunter2" in r.getMessage()]
