"""A small thread-safe connection pool for PyMySQL, which has none.

Same surface as psycopg_pool's as far as the runtime uses it: getconn,
putconn, connection(), check(), open(), close(). A connection given back
closed, or failing a ping at ``check()``, is dropped and replaced lazily.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.exceptions import DatabaseError


class SimplePool:
    def __init__(self, factory: Callable[[], Any], max_size: int, timeout: float):
        self._factory = factory
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(max_size)
        self._timeout = timeout
        self._closed = False
        self._max_size = max_size
        self._lent = 0  # connections given out and not yet back
        self._count_lock = threading.Lock()

    def open(self, wait: bool = False) -> None:
        self._closed = False

    def getconn(self) -> Any:
        if not self._slots.acquire(timeout=self._timeout):
            raise DatabaseError("no free connection in the pool")
        try:
            while True:
                try:
                    conn = self._idle.get_nowait()
                except queue.Empty:
                    conn = self._factory()
                if getattr(conn, "open", True):
                    with self._count_lock:
                        self._lent += 1
                    return conn
        except BaseException:
            self._slots.release()
            raise

    def putconn(self, conn: Any) -> None:
        with self._count_lock:
            self._lent -= 1
        try:
            if not self._closed and getattr(conn, "open", False):
                try:
                    conn.rollback()  # nothing half-done goes back to the pool
                    self._idle.put(conn)
                    return
                except Exception:  # noqa: BLE001 - a broken connection: closed below
                    pass
            close_quietly(conn)
        finally:
            self._slots.release()

    @contextmanager
    def connection(self) -> Iterator[Any]:
        conn = self.getconn()
        try:
            yield conn
        finally:
            self.putconn(conn)

    def check(self) -> None:
        """Drop idle connections that no longer answer."""
        alive = []
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                break
            try:
                conn.ping(reconnect=False)
                alive.append(conn)
            except Exception:  # noqa: BLE001 - any failed ping means a dead connection
                close_quietly(conn)
        for conn in alive:
            self._idle.put(conn)

    def get_stats(self) -> dict[str, int]:
        """psycopg_pool's names: ``pool_size`` counts lent and idle connections."""
        with self._count_lock:
            lent = self._lent
        idle = self._idle.qsize()
        return {"pool_max": self._max_size, "pool_size": lent + idle, "pool_available": idle}

    def close(self, timeout: float = 5.0) -> None:
        self._closed = True
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                return
            close_quietly(conn)
