"""QueueClient calls that write with several statements, on a caller's connection in
autocommit mode (db/own_transaction.py): each runs in one transaction of its own, so nothing
of it is seen before all of it is, and a failure half-way writes nothing. On a connection
in a transaction (the caller's, even one the caller opened on an autocommit connection),
the caller's transaction holds them, as before.

Found by the process example's CI failure: on its autocommit connection, a worker claimed
pay-1's first task between its insert and the row naming it the process's, and refused it
("does not exist (removed?)").
"""

from __future__ import annotations

import contextlib

import pytest

from nsj_queue_lib import Workflow
from nsj_queue_lib.exceptions import DatabaseError
from tests.integration.store.backends import MYSQL, POSTGRES, PSYCOPG2, TASK, on

pytestmark = on(POSTGRES, PSYCOPG2, MYSQL)


def autocommit_conn(backend):
    conn = backend.client_conn()
    if backend.dialect == "postgres":
        conn.autocommit = True
    else:
        conn.autocommit(True)
    return conn


def in_transaction(backend, conn) -> bool:
    if backend.kind == "postgres":
        return conn.info.transaction_status != 0  # psycopg.pq.TransactionStatus.IDLE
    if backend.kind == "psycopg2":
        return conn.get_transaction_status() != 0
    return bool(conn.server_status & 1)  # SERVER_STATUS_IN_TRANS


def tasks(backend) -> int:
    return backend.count()


def processes(backend) -> int:
    return backend.value(f"SELECT count(*) FROM {backend.table}_processes")


def test_a_process_start_is_written_whole_or_not_at_all(backend):
    conn = autocommit_conn(backend)
    client = backend.client(conn)
    task = client.start_process("pay-1", "payment_init", {"amount": 1})
    assert not in_transaction(backend, conn)
    # Committed, all of it: another session sees the task as the process's.
    assert backend.row(task)["status"] == "pendente"
    assert (
        backend.value(
            f"SELECT process_id FROM {backend.table}_process_tasks WHERE task_id = %s", (task,)
        )
        == "pay-1"
    )
    backend.execute(f"DROP TABLE {backend.table}_process_tasks")  # the call's last write fails
    with pytest.raises(DatabaseError):
        client.start_process("pay-2", "payment_init", {"amount": 2})
    assert not in_transaction(backend, conn)
    assert (tasks(backend), processes(backend)) == (1, 1)  # pay-2 left nothing
    assert conn_autocommit(backend, conn)


def conn_autocommit(backend, conn) -> bool:
    return bool(conn.autocommit if backend.dialect == "postgres" else conn.get_autocommit())


def test_a_child_is_never_seen_ready_before_its_parent_ends(backend):
    conn = autocommit_conn(backend)
    client = backend.client(conn)
    parent = client.insert_task(**TASK)
    child = client.insert_task(**dict(TASK, after=[parent]))
    assert backend.row(child)["status"] == "aguardando"
    backend.execute(f"DROP TABLE {backend.table}_parents")  # the edges' table
    with pytest.raises(DatabaseError):
        client.insert_task(**dict(TASK, after=[parent]))
    assert tasks(backend) == 2  # the failed child left no 'pendente' row behind


def test_a_workflow_is_enqueued_whole_or_not_at_all(backend):
    conn = autocommit_conn(backend)
    client = backend.client(conn)
    flow = Workflow("etl")
    extract = flow.add(**TASK)
    flow.add(**dict(TASK, after=[extract]))
    flow.enqueue(client)
    statuses = sorted(backend.statuses().values())
    assert statuses == ["aguardando", "pendente"]
    backend.execute(f"DROP TABLE {backend.table}_workflow_tasks")
    failing = Workflow("etl")
    first = failing.add(**TASK)
    failing.add(**dict(TASK, after=[first]))
    with pytest.raises(DatabaseError):
        failing.enqueue(client)
    assert sorted(backend.statuses().values()) == statuses


def test_inside_the_callers_transaction_nothing_is_committed_by_the_call(backend):
    conn = autocommit_conn(backend)
    client = backend.client(conn)
    with contextlib.suppress(RuntimeError), caller_transaction(backend, conn):
        client.start_process("pay-1", "payment_init", {"amount": 1})
        assert in_transaction(backend, conn)  # still the caller's
        raise RuntimeError("the caller rolls back")
    assert (tasks(backend), processes(backend)) == (0, 0)


@contextlib.contextmanager
def caller_transaction(backend, conn):
    """A transaction the caller opens on its autocommit connection, rolled back on error."""
    if backend.kind == "postgres":
        with conn.transaction():
            yield
        return
    if backend.kind == "psycopg2":
        with conn.cursor() as cur:
            cur.execute("BEGIN")
    else:
        conn.begin()
    try:
        yield
    except BaseException:
        if backend.kind == "psycopg2":
            with conn.cursor() as cur:
                cur.execute("ROLLBACK")
        else:
            conn.rollback()
        raise


@on(POSTGRES)
def test_a_bad_item_in_a_stream_leaves_the_callers_transaction_going_on(backend):
    """insert_tasks streams 100 tasks or more with COPY (psycopg 3); an item that fails the
    client's checks abandons the stream, back to a savepoint: the caller's transaction,
    one it opened on its autocommit connection too, goes on."""
    conn = autocommit_conn(backend)
    client = backend.client(conn)
    items = [dict(TASK, chave_externa=str(n)) for n in range(150)]
    items[120] = dict(TASK, prioridade="high")
    with conn.transaction():
        kept = client.insert_task(**TASK)
        with pytest.raises((TypeError, ValueError)):
            client.insert_tasks(items)
        conn.execute("SELECT 1")  # not aborted
    assert backend.statuses() == {kept: "pendente"}
    with pytest.raises((TypeError, ValueError)):
        client.insert_tasks(items)  # in the call's own transaction
    assert backend.statuses() == {kept: "pendente"} and not in_transaction(backend, conn)
