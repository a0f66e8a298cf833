"""The socket server's check-tasks access to a PostgreSQL queue.

Two connections: one polls for ready tasks, one only LISTENs (the worker's
``PostgresListener``), so that NOTIFY 'HALT' typed by an operator reaches
workers that listen through the server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.db.postgres.listener import PostgresListener
from nsj_queue_lib.db.sql_files import ready_tasks_sql
from nsj_queue_lib.exceptions import DatabaseError


class PostgresTaskSource:
    supports_listen = True

    def __init__(self, connect: Callable[[], psycopg.Connection], table: str, channel: str):
        self.table = table
        self._connect = connect
        self._listener = PostgresListener(connect, channel)
        self._poll: Any = None
        self._sql = ready_tasks_sql(table, now="clock_timestamp()")

    def open(self) -> None:
        self.close()
        try:
            self._poll = self._connect()
            self._listener.open()
        except (psycopg.Error, DatabaseError) as exc:
            self.close()
            raise DatabaseError(
                f"connecting to PostgreSQL for the check-tasks thread failed: {exc}"
            ) from exc

    def close(self) -> None:
        close_quietly(self._poll)
        self._poll = None
        self._listener.close()

    def has_ready_tasks(self) -> bool:
        if self._poll is None:
            raise DatabaseError("the task source is not open")
        try:
            return bool(self._poll.execute(self._sql).fetchone()[0])
        except psycopg.Error as exc:
            raise DatabaseError(f"checking {self.table} for ready tasks failed: {exc}") from exc

    def cancel_requests(self) -> list[int]:
        return []  # QueueClient.cancel_task notifies the channel, which is relayed

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        return self._listener.wait(timeout, interrupt_fd)
