"""Waits for NOTIFY on the queue's channel, on a dedicated autocommit connection.

The connection runs nothing but LISTEN and the wait, so every notification
the server sends is read here and none can sit unseen in a buffer.

LISTEN is session state: behind a pooler in transaction mode (PgBouncer
``pool_mode = transaction``) the LISTEN lands on a server connection that is
handed back to the pool as soon as it returns, and no notification ever
reaches this connection. ``probe`` tells: it sends a NOTIFY from another
connection and waits for it here (``notify/checked.py`` acts on the answer).
"""

from __future__ import annotations

import secrets
import select
import time
from collections.abc import Callable

import psycopg
from psycopg import sql

from nsj_queue_lib.exceptions import DatabaseError


class PostgresListener:
    def __init__(self, connect: Callable[[], psycopg.Connection], channel: str):
        self._connect = connect
        self.channel = channel
        self._conn: psycopg.Connection | None = None

    def open(self) -> None:
        self.close()
        try:
            conn = self._connect()
            if not conn.autocommit:
                conn.close()
                raise ValueError("the LISTEN connection must be autocommit")
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except psycopg.Error as exc:
            raise DatabaseError(f"LISTEN {self.channel} failed: {exc}") from exc
        self._conn = conn

    def probe(self, token: str, timeout: float) -> tuple[bool, list[str]]:
        """Send ``token`` on the channel from a new connection and wait for it here.

        Returns whether it arrived within ``timeout`` seconds, and the other
        payloads received meanwhile (real wake-ups, to be acted on).
        """
        sender = self._connect()
        try:
            sender.execute("SELECT pg_notify(%s, %s)", (self.channel, token))
        except psycopg.Error as exc:
            raise DatabaseError(f"NOTIFY {self.channel} failed: {exc}") from exc
        finally:
            sender.close()
        others: list[str] = []
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            payloads = self._received(left)
            if token in payloads:
                others += [p for p in payloads if p != token]
                return True, others
            others += payloads
        return False, others

    def _received(self, timeout: float) -> list[str]:
        conn = self._conn
        if conn is None:
            raise DatabaseError("listener is not connected")
        try:
            return [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]
        except psycopg.Error as exc:
            raise DatabaseError(f"LISTEN connection lost: {exc}") from exc

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a connection that may be broken
                pass
            self._conn = None

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        """Block until a notification, ``interrupt_fd`` is readable, or the timeout.

        Returns the payloads received (empty on timeout or interruption).
        """
        if self._conn is None:
            raise DatabaseError("listener is not connected")
        try:
            readable, _, _ = select.select(
                [self._conn.fileno(), interrupt_fd], [], [], max(0.0, timeout)
            )
        except (OSError, ValueError) as exc:
            raise DatabaseError(f"waiting on the LISTEN connection failed: {exc}") from exc
        if self._conn.fileno() not in readable:
            return []
        try:
            notes = list(self._conn.notifies(timeout=0))
        except psycopg.Error as exc:
            raise DatabaseError(f"LISTEN connection lost: {exc}") from exc
        if not notes:
            # Readable without a notification: a server message or a closed
            # socket. A round trip tells which, and avoids spinning on it.
            try:
                self._conn.execute("SELECT 1")
            except psycopg.Error as exc:
                raise DatabaseError(f"LISTEN connection lost: {exc}") from exc
        return [n.payload for n in notes]


def listen_receives(connect: Callable[[], psycopg.Connection], timeout: float) -> bool:
    """Whether a LISTEN through ``connect`` hears a NOTIFY sent from another connection.

    On a private channel, so no worker is woken. False behind a pooler in
    transaction mode; raises ``DatabaseError`` when the database is unreachable.
    """
    token = secrets.token_hex(8)
    listener = PostgresListener(connect, f"nsjq_probe_{token}")
    listener.open()
    try:
        heard, _ = listener.probe(token, timeout)
    finally:
        listener.close()
    return heard
