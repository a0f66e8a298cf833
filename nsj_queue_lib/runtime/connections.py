"""Opening database connections and the executors' pool, for the configured DB_DRIVER.

Errors while connecting leave here as ``DatabaseError`` (the driver's error
is the cause), so the dispatcher treats every driver's outage the same way.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.settings import Settings

# Dead peers are found by TCP keepalive in about 20 s instead of hanging on a
# LISTEN connection forever.
_KEEPALIVE: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 2,
}
CONNECT_TIMEOUT_SECONDS = 5


def connect(
    settings: Settings, autocommit: bool, configure: Callable[[object], None] | None = None
) -> Any:
    """A new connection; ``configure`` runs on it once (e.g. session settings)."""
    conn: Any
    if settings.db_driver == "POSTGRES":
        import psycopg

        try:
            conn = psycopg.connect(
                settings.postgres_conninfo(),
                autocommit=autocommit,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                **_KEEPALIVE,
            )
        except psycopg.Error as exc:
            raise DatabaseError(f"connecting to PostgreSQL failed: {exc}".strip()) from exc
    else:
        import pymysql

        try:
            from pymysql.constants import CLIENT

            # Multi-statements let the store send a task's completion, commit
            # and next claim in one round trip (see db/mysql/batch.py).
            conn = pymysql.connect(
                host=settings.db_host,
                port=settings.db_port,
                user=settings.db_user,
                password=settings.db_pass,
                database=settings.db_name,
                autocommit=autocommit,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                charset="utf8mb4",
                client_flag=CLIENT.MULTI_STATEMENTS,
            )
        except pymysql.err.Error as exc:
            raise DatabaseError(f"connecting to MySQL failed: {exc}") from exc
    if configure is not None:
        configure(conn)
    return conn


def make_pool(settings: Settings, size: int, configure: Callable[[object], None] | None = None):
    """One connection per executor slot plus one for recording failures.

    Autocommit: the executor opens and closes transactions with explicit
    statements (see the stores' ``claim``).
    """
    if settings.db_driver == "POSTGRES":
        from psycopg_pool import ConnectionPool

        return ConnectionPool(
            settings.postgres_conninfo(),
            min_size=size,
            max_size=size + 1,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_SECONDS, **_KEEPALIVE},
            configure=configure,
            name=f"nsj_queue_lib:{settings.queue_name}",
            timeout=CONNECT_TIMEOUT_SECONDS * 2,
            open=False,
        )
    return SimplePool(lambda: connect(settings, True, configure), size + 1)


class SimplePool:
    """A small thread-safe pool for drivers without one (PyMySQL).

    Same surface as psycopg_pool's as far as the runtime uses it: getconn,
    putconn, connection(), check(), open(), close(). A connection given back
    closed, or failing a ping at ``check()``, is dropped and replaced lazily.
    """

    def __init__(
        self,
        factory: Callable[[], object],
        max_size: int,
        timeout: float = CONNECT_TIMEOUT_SECONDS * 2,
    ):
        self._factory = factory
        self._idle: queue.LifoQueue = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(max_size)
        self._timeout = timeout
        self._closed = False

    def open(self, wait: bool = False) -> None:
        self._closed = False

    def getconn(self):
        if not self._slots.acquire(timeout=self._timeout):
            raise DatabaseError("no free connection in the pool")
        try:
            while True:
                try:
                    conn = self._idle.get_nowait()
                except queue.Empty:
                    return self._factory()
                if getattr(conn, "open", True):
                    return conn
        except BaseException:
            self._slots.release()
            raise

    def putconn(self, conn) -> None:
        try:
            if not self._closed and getattr(conn, "open", False):
                try:
                    conn.rollback()  # nothing half-done goes back to the pool
                    self._idle.put(conn)
                    return
                except Exception:  # noqa: BLE001 - a broken connection: closed below
                    pass
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a connection that is broken already
                pass
        finally:
            self._slots.release()

    @contextmanager
    def connection(self) -> Iterator[object]:
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
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - closing a connection that is dead already
                    pass
        for conn in alive:
            self._idle.put(conn)

    def close(self, timeout: float | None = None) -> None:
        self._closed = True
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                return
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a connection that may be broken
                pass
