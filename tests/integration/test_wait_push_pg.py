"""wait_for_task's push on PostgreSQL (db/postgres/end_trigger.sql, db/postgres/task_end.py):
the end trigger NOTIFYs a task's end only while a session says it waits for it; a wait
LISTENs on the caller's idle connection and leaves it as it was (no LISTEN, no lock, no
transaction); a connection inside a transaction polls and keeps its transaction; a queue
without the trigger (the partitioned layout) polls."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from nsj_queue_lib import QueueClient
from nsj_queue_lib.db.dialect import task_end_channel, task_end_lock_key
from tests.helpers.databases import collect_until_sentinel

pytestmark = pytest.mark.timeout(60)


def insert(conn, table: str) -> int:
    task_id = QueueClient(conn, table).insert_task("t", "w", "p", "k", {})
    if not conn.autocommit:
        conn.commit()
    return task_id


def end_task(dsn: str, table: str, task_id: int, delay: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        with psycopg.connect(dsn) as conn:
            conn.execute(
                f"UPDATE {table} SET status = 'sucesso', mensagem = 'ok' WHERE id = %s", (task_id,)
            )

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def session_state(conn) -> tuple[list, int]:
    channels = [r[0] for r in conn.execute("SELECT pg_listening_channels()").fetchall()]
    locks = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
    ).fetchone()[0]
    if not conn.autocommit:
        conn.rollback()
    return channels, locks


def test_the_end_trigger_notifies_only_waited_tasks(pg_queue, pg_dsn):
    channel = task_end_channel(pg_queue.name)
    key = task_end_lock_key(pg_queue.name)
    with (
        psycopg.connect(pg_dsn, autocommit=True) as listener,
        psycopg.connect(pg_dsn, autocommit=True) as other,
    ):
        listener.execute(f'LISTEN "{channel}"')
        unwaited, waited = insert(other, pg_queue.table), insert(other, pg_queue.table)
        other.execute("SELECT pg_advisory_lock_shared(%s, %s)", (key, waited))
        for task_id in (unwaited, waited):
            end_task(pg_dsn, pg_queue.table, task_id, 0).join()
        assert collect_until_sentinel(listener, other, channel) == [str(waited)]


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "idle-transactional"])
def test_a_wait_is_woken_by_the_end_and_leaves_the_connection_as_it_was(
    pg_queue, pg_dsn, autocommit
):
    with psycopg.connect(pg_dsn, autocommit=autocommit) as conn:
        task_id = insert(conn, pg_queue.table)
        thread = end_task(pg_dsn, pg_queue.table, task_id, 0.3)
        started = time.monotonic()
        view = QueueClient(conn, pg_queue.table).wait_for_task(task_id, 10)
        thread.join()
        assert view["status"] == "sucesso" and view["mensagem"] == "ok"
        assert 0.3 <= time.monotonic() - started < 2
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert session_state(conn) == ([], 0)


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "idle-transactional"])
def test_the_waiter_hears_its_task_end(pg_queue, pg_dsn, autocommit):
    """register, then nothing but the wait: it returns True at the end's commit (the NOTIFY),
    and look_and_close reads the end and leaves the connection as it was."""
    with psycopg.connect(pg_dsn, autocommit=autocommit) as conn:
        task_id = insert(conn, pg_queue.table)
        waiter = QueueClient(conn, pg_queue.table)._store.end_waiter(conn, task_id)
        assert waiter is not None
        pushed, row = waiter.register(task_id)
        assert pushed and row["status"] == "pendente"
        assert session_state(conn)[0] == [task_end_channel(pg_queue.name)]
        thread = end_task(pg_dsn, pg_queue.table, task_id, 0.2)
        started = time.monotonic()
        assert waiter.wait(10) is True
        assert time.monotonic() - started < 5
        thread.join()
        assert waiter.look_and_close()["status"] == "sucesso"
        waiter.close()  # nothing left to do
        assert session_state(conn) == ([], 0)


def test_inside_a_transaction_it_polls_and_keeps_the_transaction(pg_queue, pg_dsn):
    with psycopg.connect(pg_dsn) as conn:
        task_id = insert(conn, pg_queue.table)
        conn.execute("CREATE TEMP TABLE mine (x int); INSERT INTO mine VALUES (1)")
        thread = end_task(pg_dsn, pg_queue.table, task_id, 0.2)
        view = QueueClient(conn, pg_queue.table).wait_for_task(task_id, 10)
        thread.join()
        assert view["status"] == "sucesso"
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert conn.execute("SELECT x FROM mine").fetchone() == (1,)
        assert conn.execute("SELECT pg_listening_channels()").fetchall() == []


def test_a_timeout_and_a_later_attempts_id(pg_queue, pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        client = QueueClient(conn, pg_queue.table)
        task_id = insert(conn, pg_queue.table)
        with pytest.raises(TimeoutError, match="still pendente"):
            client.wait_for_task(task_id, 0.2)
        assert session_state(conn) == ([], 0)
        # A second attempt: waited for by its own id, registered under the first's.
        retry = conn.execute(
            f"INSERT INTO {pg_queue.table} (id_inicial, origem, destino, processo, "
            "chave_externa, payload, tentativa) VALUES (%s, 't', 'w', 'p', 'k', '{}', 2) "
            "RETURNING id",
            (task_id,),
        ).fetchone()[0]
        conn.execute(
            f"UPDATE {pg_queue.table} SET status = 'falha', reenfileirado = true WHERE id = %s",
            (task_id,),
        )
        thread = end_task(pg_dsn, pg_queue.table, retry, 0.3)
        view = client.wait_for_task(retry, 10)
        thread.join()
        assert (view["id_inicial"], view["id"], view["status"]) == (task_id, retry, "sucesso")
        assert session_state(conn) == ([], 0)


def test_the_partitioned_layout_polls(pg_partitioned_queue, pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        task_id = insert(conn, pg_partitioned_queue.table)
        thread = end_task(pg_dsn, pg_partitioned_queue.table, task_id, 0.2)
        view = QueueClient(conn, pg_partitioned_queue.table).wait_for_task(task_id, 10)
        thread.join()
        assert view["status"] == "sucesso"
        assert session_state(conn) == ([], 0)


def test_a_connection_with_notify_handlers_polls(pg_queue, pg_dsn):
    """The caller's handlers keep their notifications: the wait does not LISTEN."""
    heard = []
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.add_notify_handler(heard.append)
        conn.execute('LISTEN "mine"')
        task_id = insert(conn, pg_queue.table)
        thread = end_task(pg_dsn, pg_queue.table, task_id, 0.2)
        with psycopg.connect(pg_dsn, autocommit=True) as other:
            other.execute("SELECT pg_notify('mine', 'hello')")
        assert QueueClient(conn, pg_queue.table).wait_for_task(task_id, 10)["status"] == "sucesso"
        thread.join()
        conn.execute("SELECT 1")  # delivers what arrived meanwhile to the handler
        assert [n.payload for n in heard] == ["hello"]
        assert session_state(conn) == (["mine"], 0)
