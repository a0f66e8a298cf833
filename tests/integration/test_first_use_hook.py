"""The executors' connections run an armed hook before a handler's first statement, by every
way psycopg sends one (db/postgres/first_use.py): group commit's savepoint depends on it."""

from __future__ import annotations

import os

import psycopg
import pytest

from nsj_queue_lib.db.postgres import first_use
from nsj_queue_lib.db.postgres.driver import HandlerConnection

TABLE = f"nsjq_first_use_{os.getpid()}"  # one per xdist worker process


@pytest.fixture
def conn(pg_dsn, pg_admin):
    pg_admin.execute(f"DROP TABLE IF EXISTS {TABLE}; CREATE TABLE {TABLE} (n int)")
    # As the executors get it: autocommit, the transaction opened by an explicit BEGIN.
    connection = HandlerConnection.connect(pg_dsn, autocommit=True)
    connection.execute("BEGIN")
    yield connection
    connection.close()
    pg_admin.execute(f"DROP TABLE IF EXISTS {TABLE}")


def insert(cur) -> None:
    cur.execute(f"INSERT INTO {TABLE} VALUES (1)")


def insert_many(cur) -> None:
    cur.executemany(f"INSERT INTO {TABLE} VALUES (%s)", [(1,), (2,)])


def copy(cur) -> None:
    with cur.copy(f"COPY {TABLE} (n) FROM STDIN") as copying:
        copying.write_row((1,))


def stream(cur) -> None:
    list(cur.stream(f"INSERT INTO {TABLE} VALUES (1) RETURNING n"))


def nested_transaction(cur) -> None:
    with cur.connection.transaction():
        pass
    insert(cur)


def pipeline(cur) -> None:
    with cur.connection.pipeline():
        insert(cur)


def server_cursor(cur) -> None:
    with cur.connection.cursor("named") as named:
        named.execute(f"SELECT n FROM {TABLE}")
        named.fetchall()
    insert(cur)


def client_cursor(cur) -> None:
    insert(psycopg.ClientCursor(cur.connection))


WAYS = [insert, insert_many, copy, stream, nested_transaction, pipeline, server_cursor]
WAYS.append(client_cursor)


@pytest.mark.parametrize("way", WAYS, ids=lambda way: way.__name__)
def test_the_hook_runs_once_before_the_first_statement(conn, way):
    calls = []

    def hook():
        calls.append(1)
        conn.pgconn.exec_(b"SAVEPOINT first_use")  # as group commit's, through libpq

    conn.arm_first_use(hook)
    way(conn.cursor())
    insert(conn.cursor())  # a second statement: the hook ran once
    assert calls == [1]
    assert conn.disarm_first_use() == first_use.RAN
    conn.execute("ROLLBACK TO SAVEPOINT first_use")
    # The savepoint came before the first statement: all of the handler's writes are gone.
    assert conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone() == (0,)


@pytest.mark.parametrize("end", ["commit", "rollback"])
def test_the_hook_runs_before_the_handler_ends_the_transaction(conn, end):
    calls = []
    conn.arm_first_use(lambda: calls.append(conn.info.transaction_status))
    getattr(conn, end)()
    assert calls == [psycopg.pq.TransactionStatus.INTRANS]  # before COMMIT / ROLLBACK


def test_an_unused_connection_leaves_the_hook_armed(conn):
    conn.arm_first_use(lambda: pytest.fail("no statement was sent"))
    conn.cursor()  # a cursor alone sends nothing
    assert conn.disarm_first_use() == first_use.UNUSED
    insert(conn.cursor())  # disarmed: nothing runs


def test_a_failing_hook_is_told_and_the_statement_goes_on(conn):
    def hook():
        raise RuntimeError("no savepoint")

    conn.arm_first_use(hook)
    insert(conn.cursor())
    assert conn.disarm_first_use() == first_use.FAILED
    assert conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone() == (1,)


def test_the_self_check_finds_the_hook_running_on_the_pinned_psycopg(conn):
    first_use._check.checked.pop(HandlerConnection, None)
    assert first_use.hook_fires(conn)
    assert conn.disarm_first_use() == first_use.UNUSED  # the check left nothing armed
    assert first_use._check.checked[HandlerConnection] is True
