"""``insert_task`` on a psycopg 3 connection (db/postgres/single_insert.py): the INSERT in
the round trip that opens the caller's transaction, on real PostgreSQL.

What must hold is what psycopg's own path gave: the transaction stays the caller's (a
rollback undoes the task, a commit keeps it), the row is the same, errors are the same
exceptions, and nothing is prepared twice on one connection.
"""

from __future__ import annotations

import datetime

import psycopg
import pytest

from nsj_queue_lib import QueueClient
from nsj_queue_lib.db.postgres import single_insert
from nsj_queue_lib.exceptions import DatabaseError

IDLE = psycopg.pq.TransactionStatus.IDLE
INTRANS = psycopg.pq.TransactionStatus.INTRANS
TASK = dict(origem="a", destino="b", processo="p", chave_externa="k", payload={"n": 1})


@pytest.fixture
def conn(pg_dsn):
    conn = psycopg.connect(pg_dsn)
    try:
        yield conn
    finally:
        conn.close()


def _rows(pg_admin, queue):
    return pg_admin.execute(
        f"SELECT chave_externa, payload::text, payload_hash, prioridade, tenant,"
        f" grupo_empresarial, data_hora, data_hora = data_hora_inicial, status"
        f" FROM {queue.table} ORDER BY id"
    ).fetchall()


def _prepared(conn) -> int:
    return conn.execute(
        "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'nsjq%%'"
    ).fetchone()[0]


def test_the_insert_opens_the_callers_transaction_in_one_round_trip(conn, pg_queue, pg_admin):
    client = QueueClient(conn, pg_queue.table)
    assert conn.pgconn.transaction_status == IDLE
    first = client.insert_task(**TASK)
    # The transaction is open and the caller's: its rollback undoes the task.
    assert conn.pgconn.transaction_status == INTRANS
    conn.rollback()
    assert _rows(pg_admin, pg_queue) == []
    second = client.insert_task(**{**TASK, "chave_externa": "kept"})
    conn.commit()
    assert second > first
    assert [r[0] for r in _rows(pg_admin, pg_queue)] == ["kept"]


def test_the_row_is_the_one_psycopgs_path_writes(conn, pg_queue, pg_admin):
    """The same tasks through the pipelined path and through psycopg's (a connection in
    pipeline mode never takes the pipelined one) give the same rows."""
    due = datetime.datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.timezone.utc)
    tasks = [
        TASK,
        {**TASK, "payload": {"text": "ação ☃", "list": [1, 2]}, "prioridade": 7},
        {**TASK, "tenant": 5, "grupo_empresarial": "g", "data_hora": due},
    ]
    client = QueueClient(conn, pg_queue.table)
    for task in tasks:
        client.insert_task(**task)  # each opens its transaction: the pipelined path
        conn.commit()
    assert _prepared(conn) == 1
    with conn.pipeline():
        for task in tasks:
            client.insert_task(**task)
    conn.commit()
    assert _prepared(conn) == 1
    rows = _rows(pg_admin, pg_queue)
    assert rows[2][6] == rows[5][6] == due and all(r[7] for r in rows)
    # Every column but the enqueue instant of the tasks due now.
    same = [r[:6] + r[7:] for r in rows]
    assert same[:3] == same[3:]


def test_inside_an_open_transaction_and_in_autocommit(conn, pg_dsn, pg_queue, pg_admin):
    """psycopg's own path: a statement prepared in an earlier transaction could be missing
    there behind a pooler, and would fail the caller's transaction."""
    conn.execute(f"SELECT count(*) FROM {pg_queue.table}")  # the caller's transaction
    QueueClient(conn, pg_queue.table).insert_task(**TASK)
    assert conn.pgconn.transaction_status == INTRANS
    assert _prepared(conn) == 0
    conn.rollback()
    with psycopg.connect(pg_dsn, autocommit=True) as auto:
        QueueClient(auto, pg_queue.table).insert_task(**TASK)
        assert auto.pgconn.transaction_status == IDLE  # committed by itself
        assert _prepared(auto) == 0
    assert len(_rows(pg_admin, pg_queue)) == 1


def test_a_statement_gone_from_the_session_is_healed(conn, pg_queue, pg_admin):
    """As behind a pooler in transaction mode (another server connection, or DISCARD ALL):
    the transaction it opened is rolled back and run again with the unnamed statement."""
    client = QueueClient(conn, pg_queue.table)
    client.insert_task(**TASK)
    conn.commit()
    conn.execute("DEALLOCATE ALL")
    conn.commit()
    client.insert_task(**{**TASK, "chave_externa": "after"})
    conn.commit()
    assert [r[0] for r in _rows(pg_admin, pg_queue)] == ["k", "after"]


def test_prepared_once_per_connection_across_clients(conn, pg_queue):
    for _ in range(3):
        QueueClient(conn, pg_queue.table).insert_task(**TASK)
        conn.commit()
    assert _prepared(conn) == 1


def test_a_failed_insert_raises_and_leaves_the_transaction_failed(conn, pg_queue, pg_admin):
    client = QueueClient(conn, pg_queue.table)
    pg_admin.execute(
        f"ALTER TABLE {pg_queue.table} ADD CONSTRAINT no_bad CHECK (chave_externa <> 'bad')"
    )
    with pytest.raises(DatabaseError, match="insert_task failed"):
        client.insert_task(**{**TASK, "chave_externa": "bad"})
    assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.INERROR
    conn.rollback()
    client.insert_task(**TASK)
    conn.commit()
    assert len(_rows(pg_admin, pg_queue)) == 1


def test_a_connection_shared_by_threads(conn, pg_queue, pg_admin):
    """psycopg serializes a connection's operations with its lock; so does this path."""
    import threading

    client = QueueClient(conn, pg_queue.table)
    errors: list[BaseException] = []

    def enqueue(n: int) -> None:
        try:
            for i in range(50):
                client.insert_task(**{**TASK, "chave_externa": f"{n}-{i}"})
                conn.commit()  # the next insert, of any thread, may open a transaction
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=enqueue, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    conn.commit()
    assert errors == [] and len(_rows(pg_admin, pg_queue)) == 200


def test_positional_placeholders():
    text, names = single_insert.positional("SELECT %(a)s, %(b)s::int, coalesce(%(a)s, 1)")
    assert text == "SELECT $1, $2::int, coalesce($1, 1)" and names == ("a", "b")
    with pytest.raises(ValueError):
        single_insert.positional("SELECT %(a)s LIKE 'x%%'")
