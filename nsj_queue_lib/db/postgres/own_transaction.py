"""A client call's own transaction on a psycopg 3 or psycopg2 connection in autocommit mode
(db/own_transaction.py says when one is opened)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg

# psycopg2.extensions.TRANSACTION_STATUS_IDLE, without importing psycopg2 (optional).
_PSYCOPG2_IDLE = 0


def own_transaction(conn: Any) -> contextlib.AbstractContextManager[Any]:
    """BEGIN ... COMMIT around the block when ``conn`` is in autocommit mode and outside any
    transaction (ROLLBACK when the block raises); else nothing."""
    if not getattr(conn, "autocommit", False):
        return contextlib.nullcontext()
    if isinstance(conn, psycopg.Connection):
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            return contextlib.nullcontext()
        return conn.transaction()
    status = getattr(conn, "get_transaction_status", None)  # psycopg2
    if status is None or status() != _PSYCOPG2_IDLE:
        return contextlib.nullcontext()
    return _statements(conn)


@contextlib.contextmanager
def _statements(conn: Any) -> Iterator[None]:
    """psycopg2 in autocommit mode sends what it is given: its commit() does nothing there."""
    with conn.cursor() as cur:
        cur.execute("BEGIN")
    try:
        yield
    except BaseException:
        # A lost connection's transaction ends with it: the block's error is the one to see.
        with contextlib.suppress(Exception), conn.cursor() as cur:
            cur.execute("ROLLBACK")
        raise
    with conn.cursor() as cur:
        cur.execute("COMMIT")
