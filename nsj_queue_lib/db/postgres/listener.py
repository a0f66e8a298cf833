"""Waits for NOTIFY on the queue's channel, on a dedicated autocommit connection.

The connection runs nothing but LISTEN and the wait, so every notification
the server sends is read here and none can sit unseen in a buffer.
"""

from __future__ import annotations

import select
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
