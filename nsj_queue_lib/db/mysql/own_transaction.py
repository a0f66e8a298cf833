"""A client call's own transaction on a PyMySQL connection in autocommit mode
(db/own_transaction.py says when one is opened)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from pymysql.constants import SERVER_STATUS


def own_transaction(conn: Any) -> contextlib.AbstractContextManager[Any]:
    """BEGIN ... COMMIT around the block when ``conn`` is in autocommit mode and outside any
    transaction (ROLLBACK when the block raises); else nothing. Only where the connection
    tells: a BEGIN inside a transaction would commit it (MySQL's implicit commit)."""
    autocommit = getattr(conn, "get_autocommit", None)
    status = getattr(conn, "server_status", None)
    if autocommit is None or status is None or not autocommit():
        return contextlib.nullcontext()
    if status & SERVER_STATUS.SERVER_STATUS_IN_TRANS:
        return contextlib.nullcontext()
    return _statements(conn)


@contextlib.contextmanager
def _statements(conn: Any) -> Iterator[None]:
    conn.begin()
    try:
        yield
    except BaseException:
        # A lost connection's transaction ends with it: the block's error is the one to see.
        with contextlib.suppress(Exception):
            conn.rollback()
        raise
    conn.commit()
