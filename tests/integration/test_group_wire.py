"""A commit group's end on PostgreSQL (db/postgres/session.py): the successes settled, the
next group claimed and the commit, in one pipeline; driven through ``PostgresTaskSession`` as
the group drain does."""

from __future__ import annotations

from types import SimpleNamespace

import psycopg
import pytest

from nsj_queue_lib.db.postgres.session import PostgresTaskSession
from nsj_queue_lib.db.postgres.store import PostgresQueueStore
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.runtime.liveness import DatabaseLiveness
from tests.helpers.processes import enqueue, fetch_rows

# Quotes, backslashes, array punctuation, a NULL-looking word, non-ASCII, empty.
MESSAGES = ['a "quoted" one', "back\\slash \\\\", "{,}", "NULL", "ação ✓", ""]


@pytest.fixture
def ops(pg_queue, pg_dsn):
    conn = psycopg.connect(pg_dsn, autocommit=True)
    store = PostgresQueueStore(pg_queue.table)
    store.bind(conn)
    yield PostgresTaskSession(store, DatabaseLiveness(store)), conn
    conn.close()


def written_by(written) -> SimpleNamespace:
    """A group whose handlers returned these (task, mensagem)."""
    return SimpleNamespace(written=written, tx=None, processes=None)


def locks_held(conn) -> int:
    """Advisory locks of ``conn``'s session (the tasks' liveness locks)."""
    sql = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s"
    return int(conn.execute(sql, (conn.info.backend_pid,)).fetchone()[0])


def test_a_group_settles_claims_and_commits_in_one_round_trip(ops, pg_queue, pg_dsn, pg_admin):
    group_ops, conn = ops
    ids = enqueue(pg_dsn, pg_queue.table, [dict(payload="{}")] * (len(MESSAGES) + 3))
    claims = group_ops.claim_group(conn, len(MESSAGES))
    assert [c.task.id for c in claims] == ids[: len(MESSAGES)]
    # Twice: the second time through the statements prepared the first.
    for messages, claim_limit in ((MESSAGES, 2), (["x", "y"], 1)):
        following = group_ops.settle_group(
            conn,
            written_by(list(zip([c.task for c in claims], messages, strict=True))),
            claim_limit,
        )
        assert len(following) == claim_limit
        rows = {r["id"]: r for r in fetch_rows(pg_admin, pg_queue.table)}
        assert [rows[c.task.id]["status"] for c in claims] == ["sucesso"] * len(messages)
        assert [rows[c.task.id]["mensagem"] for c in claims] == messages
        # The settled tasks' locks went, the claimed ones' are held.
        assert locks_held(conn) == claim_limit
        claims = following
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # chained


def test_a_failed_commit_keeps_nothing_and_unlocks_what_it_claimed(ops, pg_queue, pg_dsn, pg_admin):
    group_ops, conn = ops
    pg_admin.execute("DROP TABLE IF EXISTS group_deferred")
    pg_admin.execute("CREATE TABLE group_deferred (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
    try:
        ids = enqueue(pg_dsn, pg_queue.table, [dict(payload="{}")] * 4)
        claims = group_ops.claim_group(conn, 2)
        conn.execute("INSERT INTO group_deferred VALUES (1), (1)")  # a handler's bad write
        with pytest.raises(DatabaseError):
            group_ops.settle_group(conn, written_by([(c.task, "ok") for c in claims]), 2)
        statuses = {r["id"]: r["status"] for r in fetch_rows(pg_admin, pg_queue.table)}
        # The group's tasks were claimed by a committed claim; nothing after it was kept.
        assert statuses == {ids[0]: "processando", ids[1]: "processando"} | {
            ids[2]: "pendente",
            ids[3]: "pendente",
        }
        assert locks_held(conn) == 0  # the settled ones' and the rolled back claim's
        assert pg_admin.execute("SELECT count(*) FROM group_deferred").fetchone()[0] == 0
    finally:
        pg_admin.execute("DROP TABLE IF EXISTS group_deferred")


def test_the_settling_statement_follows_the_claim_to_unnamed_statements(
    ops, pg_queue, pg_dsn, pg_admin
):
    group_ops, conn = ops
    enqueue(pg_dsn, pg_queue.table, [dict(payload="{}")] * 4)
    claims = group_ops.claim_group(conn, 2)
    group_ops.settle_group(conn, written_by([(c.task, "ok") for c in claims]), 0)
    conn.execute("DISCARD ALL")  # as a pooler in transaction mode between transactions
    claims = group_ops.claim_group(conn, 2)  # finds its statement gone: unnamed from now
    group_ops.settle_group(conn, written_by([(c.task, "ok") for c in claims]), 0)
    statuses = [r["status"] for r in fetch_rows(pg_admin, pg_queue.table)]
    assert statuses == ["sucesso"] * 4
