"""Guards of the PostgreSQL claim that no other test would miss (issue 22, scripts/mutants.py).

A ready row that another session holds locked (a handler updating a task by
id, a claim in flight) must be passed at once by every claim path: the claim
query of an idle executor, the claim function a completion calls, and the
plain SQL used when that function is missing. Without ``SKIP LOCKED`` the
claim would wait on the row; the claiming session's ``lock_timeout`` turns
that wait into an error instead of a slow pass. Each path also takes the
claimed task's liveness lock on the claiming session.
"""

from __future__ import annotations

import psycopg
import pytest

from nsj_queue_lib.db.postgres.store import PostgresQueueStore, queue_lock_key, task_lock_keys
from tests.helpers.processes import enqueue, fetch_rows


@pytest.fixture
def worker_conn(pg_dsn, pg_queue):
    """An executor-like connection (autocommit; the store writes the transaction statements)."""
    conn = psycopg.connect(pg_dsn, autocommit=True)
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


@pytest.mark.parametrize("path", ["idle claim", "claim function", "plain SQL"])
def test_a_claim_passes_a_ready_row_another_session_holds_without_waiting(
    path, pg_queue, pg_dsn, pg_admin, worker_conn, row_holder
):
    if path == "plain SQL":
        pg_admin.execute(f"DROP FUNCTION {pg_queue.schema}.claim_next_{pg_queue.name}")
    store = PostgresQueueStore(pg_queue.table)
    queue_oid = store.queue_oid(worker_conn)
    queue_key = queue_lock_key(queue_oid)
    first, second, third = enqueue(
        pg_dsn,
        pg_queue.table,
        [dict(payload="a", prioridade=90), dict(payload="b", prioridade=80), dict(payload="c")],
    )
    if path == "idle claim":
        row_holder(first)
        claimed = store.claim(worker_conn, 1, queue_key)
        assert [t["id"] for t in claimed] == [second]
    else:
        [running] = store.claim(worker_conn, 1, queue_key)
        assert running["id"] == first
        row_holder(second)
        claimed = store.complete_and_claim(
            worker_conn, first, "ok", task_lock_keys(queue_oid, first), 1, queue_key
        )
        assert [t["id"] for t in claimed] == [third]
    statuses = {r["id"]: r["status"] for r in fetch_rows(pg_admin, pg_queue.table)}
    assert statuses[claimed[0]["id"]] == "processando"
    # Claimed with its liveness lock, on the connection that will run it.
    assert claimed[0]["liveness_locked"] is True
    assert (
        liveness_lock_holder(pg_admin, queue_oid, claimed[0]["id"]) == worker_conn.info.backend_pid
    )
    worker_conn.execute("ROLLBACK")
