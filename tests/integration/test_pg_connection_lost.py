"""Whether a driver error under a handler is the loss of the handler's connection
(db/postgres/driver.py's ``connection_lost``), on real PostgreSQL sessions."""

from __future__ import annotations

import psycopg
import pytest

from nsj_queue_lib.db.postgres.driver import connection_lost
from tests.helpers.worker_harness import wait_until

SOCKET_CLOSED = psycopg.OperationalError("connection socket closed")


@pytest.fixture
def handler_conn(pg_dsn):
    conn = psycopg.connect(pg_dsn)
    conn.execute("SELECT 1")  # inside a transaction, as a handler's bd_conn is
    try:
        yield conn
    finally:
        conn.close()


def _ended_by_the_server(conn, pg_admin):
    pid = conn.info.backend_pid
    pg_admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    wait_until(
        lambda: (
            not pg_admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        ),
        10,
    )


def test_an_error_that_came_before_libpq_read_the_servers_end_is_the_connections_loss(
    handler_conn, pg_admin
):
    """psycopg's wait can fail ("connection socket closed") before libpq has read what the
    server sent when it ended the session: the connection is not marked broken yet, and
    nothing else reads its socket. Once the end has reached the socket (the backend's exit
    closes it a moment after it leaves pg_stat_activity), the look finds it."""
    _ended_by_the_server(handler_conn, pg_admin)
    assert not handler_conn.broken
    wait_until(lambda: connection_lost(handler_conn, SOCKET_CLOSED), 10, "the loss seen")
    assert handler_conn.broken


def test_a_broken_connection_is_lost_for_driver_errors_only(handler_conn, pg_admin):
    _ended_by_the_server(handler_conn, pg_admin)
    with pytest.raises(psycopg.OperationalError) as raised:
        handler_conn.execute("SELECT 1")
    assert handler_conn.broken
    assert connection_lost(handler_conn, raised.value)
    assert not connection_lost(handler_conn, ValueError("the handler's own"))


def test_the_handlers_own_driver_errors_leave_a_live_connection_alone(handler_conn, pg_dsn):
    other = psycopg.connect(pg_dsn)
    other.close()
    with pytest.raises(psycopg.OperationalError) as raised:
        other.execute("SELECT 1")
    assert not connection_lost(handler_conn, raised.value)
    # The look at its socket took nothing from the session: its transaction goes on.
    assert handler_conn.execute("SELECT 2").fetchone() == (2,)
    handler_conn.close()  # closed by the handler itself: not a loss either
    assert not connection_lost(handler_conn, SOCKET_CLOSED)
