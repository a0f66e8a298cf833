"""Guards of the PostgreSQL claim that no other test would miss (issue 22, scripts/mutants.py).

A ready row that another session holds locked (a handler updating a task by
id, a claim in flight) must be passed at once by every claim path: the claim
function, at an executor's first claim and after a completion, and the claim
of a worker whose liveness locks live in the socket server
(``claim_uncommitted``). Without ``SKIP LOCKED`` the claim would wait on the
row; the claiming session's ``lock_timeout`` turns that wait into an error
instead of a slow pass. The claim function also takes the claimed task's
liveness lock on the claiming session; the client/server claim takes none
(the socket server holds it).
"""

from __future__ import annotations

import psycopg
import pytest

from nsj_queue_lib.db.driver import make_driver
from tests.helpers.processes import enqueue, fetch_rows, settings_for


@pytest.fixture
def driver(pg_dsn, pg_queue):
    return make_driver(settings_for(pg_dsn, pg_queue.table))


@pytest.fixture
def store(driver, pg_admin):
    store = driver.store()
    store.bind(pg_admin)
    return store


@pytest.fixture
def worker_conn(driver):
    """An executor's connection, as the runtime opens it (autocommit)."""
    conn = driver.connect(autocommit=True, executor=True)
    # A claim that waits on a row lock fails after this instead of hanging the test.
    conn.execute("SET lock_timeout = '2s'")
    yield conn
    conn.close()


@pytest.fixture
def row_holder(pg_dsn, pg_queue):
    """row_holder(task_id): another session locks that row by id, in a transaction left open."""
    conn = psycopg.connect(pg_dsn)

    def hold(task_id: int) -> None:
        conn.execute(f"SELECT id FROM {pg_queue.table} WHERE id = %s FOR UPDATE", (task_id,))

    yield hold
    conn.rollback()
    conn.close()


def liveness_lock_holder(conn, queue_oid: int, task_id: int) -> int | None:
    """The backend pid holding a task's liveness lock (queue oid, id mod 2^31), or None."""
    row = conn.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 2",
        (queue_oid, task_id % 2**31),
    ).fetchone()
    return None if row is None else row[0]


def statuses(conn, table: str) -> dict[int, str]:
    return {r["id"]: r["status"] for r in fetch_rows(conn, table)}


# -- SKIP LOCKED and the liveness lock, on every claim path -----------------------------------


@pytest.mark.parametrize("path", ["first claim", "after a completion", "client/server claim"])
def test_a_claim_passes_a_ready_row_another_session_holds_without_waiting(
    path, pg_queue, pg_dsn, pg_admin, store, worker_conn, row_holder
):
    first, second, third = enqueue(
        pg_dsn,
        pg_queue.table,
        [dict(payload="a", prioridade=90), dict(payload="b", prioridade=80), dict(payload="c")],
    )
    if path == "client/server claim":
        row_holder(first)
        task = store.claim_uncommitted(worker_conn)
        assert task is not None and task.id == second
        # Nobody sees it claimed before the caller took its lock on the server and committed.
        assert statuses(pg_admin, pg_queue.table)[second] == "pendente"
        store.commit_and_begin(worker_conn)
        assert statuses(pg_admin, pg_queue.table)[second] == "processando"
        # No lock in the database: the socket server holds it.
        assert liveness_lock_holder(pg_admin, store.queue_number, second) is None
        worker_conn.execute("ROLLBACK")
        return
    if path == "first claim":
        row_holder(first)
        claim, expected = store.claim(worker_conn), second
    else:
        running = store.claim(worker_conn)
        assert running is not None and running.task.id == first
        row_holder(second)
        claim = store.complete_and_claim(worker_conn, first, "ok", claim_next=True)
        expected = third
    assert claim is not None and claim.task.id == expected
    assert statuses(pg_admin, pg_queue.table)[expected] == "processando"
    # Claimed with its liveness lock, on the connection that will run it.
    assert claim.liveness_locked is True
    holder = liveness_lock_holder(pg_admin, store.queue_number, expected)
    assert holder == worker_conn.info.backend_pid
    worker_conn.execute("ROLLBACK")
