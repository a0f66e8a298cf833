"""Connections of the web server: one transaction per API call, over a few kept connections.

A connection per request would cost a connect (and its session set-up) on
every call; a handful is kept instead, each taken by one request at a time.
A connection whose transaction failed on a database error is closed rather
than handed to the next request.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from nsj_queue_lib.db.driver import Driver, close_quietly
from nsj_queue_lib.exceptions import DatabaseError

# Idle connections kept; more are opened while requests overlap, then closed.
KEPT_CONNECTIONS = 4


class Connections:
    def __init__(self, driver: Driver, kept: int = KEPT_CONNECTIONS) -> None:
        self.driver = driver
        self._kept = kept
        self._idle: list[Any] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A connection in a new transaction: committed when the block ends, rolled back
        when it raises."""
        conn = self._take()
        try:
            yield conn
            conn.commit()
        except BaseException as exc:
            if isinstance(exc, DatabaseError) or not _rolled_back(conn):
                close_quietly(conn)
            else:
                self._give_back(conn)
            raise
        self._give_back(conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            close_quietly(conn)

    def _take(self) -> Any:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self.driver.connect(autocommit=False)

    def _give_back(self, conn: Any) -> None:
        with self._lock:
            if len(self._idle) < self._kept:
                self._idle.append(conn)
                return
        close_quietly(conn)


def _rolled_back(conn: Any) -> bool:
    try:
        conn.rollback()
    except Exception:  # noqa: BLE001 - any failure: the connection is not reused
        return False
    return True
