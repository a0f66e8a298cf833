"""A claim's own transaction commits without waiting for the disk; the task's transaction
chained to it, which carries the handler's writes and its 'sucesso', waits as before
(db/postgres/wire.py, ``unflushed``)."""

from __future__ import annotations

import psycopg

from nsj_queue_lib.db.postgres.store import PostgresQueueStore
from nsj_queue_lib.db.postgres.wire import PreparedRoundTrip
from tests.helpers.processes import enqueue

SETTING = "SELECT current_setting('synchronous_commit') AS s"


def test_only_the_opened_transaction_is_unflushed(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        call = PreparedRoundTrip(SETTING, ["s"])
        rows = call.run(conn, [], b"COMMIT AND CHAIN", begin=True, unflushed=True)
        assert rows == [{"s": "off"}]
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)  # the chained one
        conn.execute("ROLLBACK")
        assert call.run(conn, [], b"COMMIT AND CHAIN", begin=True) == [{"s": "on"}]
        conn.execute("ROLLBACK")


def test_the_claimed_tasks_transaction_commits_synchronously(pg_queue, pg_dsn):
    enqueue(pg_dsn, pg_queue.table, [dict(payload="{}")])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        store = PostgresQueueStore(pg_queue.table)
        store.bind(conn)
        claim = store.claim(conn)
        assert claim is not None
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        conn.execute("ROLLBACK")
