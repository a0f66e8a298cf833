"""The drains' pooled connections: taken, given back, or dropped when broken."""

from __future__ import annotations

import contextlib
from typing import Any

from nsj_queue_lib.db.driver import ConnectionPool, close_quietly
from nsj_queue_lib.log import get_logger

logger = get_logger("executor")


class Connections:
    def __init__(self, queue_name: str, pool: ConnectionPool):
        self.queue_name = queue_name
        self.pool = pool

    def get(self) -> Any:
        """A pooled connection, or None (logged) when the database is unreachable: the
        dispatcher wakes the executors again once it is back."""
        try:
            return self.pool.getconn()
        except Exception as exc:  # noqa: BLE001 - pool timeout: database unreachable
            logger.warning(
                "queue=%s: no database connection for an executor (%s)", self.queue_name, exc
            )
            return None

    def fresh(self) -> contextlib.AbstractContextManager[Any]:
        """A pooled connection for one block (``with``), given back after it."""
        return self.pool.connection()

    def discard(self, conn: Any, replace: bool = True) -> Any:
        """Close a broken connection, give it back (the pool drops it) and take another, or
        None."""
        if conn is not None:
            close_quietly(conn)
            self.put_back(conn)
        if not replace:
            return None
        try:
            return self.pool.getconn()
        except Exception:  # noqa: BLE001 - the pool cannot serve now: the caller retries later
            return None

    def put_back(self, conn: Any) -> None:
        if conn is None:
            return
        try:
            self.pool.putconn(conn)
        except Exception:  # noqa: BLE001 - a pool closed during shutdown
            close_quietly(conn)
