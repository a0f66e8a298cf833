"""The socket server's check-tasks access to a MySQL, MariaDB or SingleStore queue.

These databases have no LISTEN/NOTIFY: the source only polls.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any

import pymysql

from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.db.mysql.family_store import ER_BAD_FIELD_ERROR
from nsj_queue_lib.db.sql_files import cancel_requests_sql, ready_tasks_sql
from nsj_queue_lib.exceptions import DatabaseError


class MysqlTaskSource:
    supports_listen = False

    def __init__(self, connect: Callable[[], Any], table: str, database_name: str):
        self.table = table
        self._connect = connect
        self._database_name = database_name
        self._conn: Any = None
        self._sql = ready_tasks_sql(table, now="CURRENT_TIMESTAMP(6)")
        self._cancels_sql = cancel_requests_sql(table)
        self._cancels_known = True  # False on a table from before db_gen --upgrade

    def open(self) -> None:
        self.close()
        try:
            self._conn = self._connect()
        except pymysql.MySQLError as exc:
            raise DatabaseError(
                f"connecting to {self._database_name} for the check-tasks thread failed: {exc}"
            ) from exc

    def close(self) -> None:
        close_quietly(self._conn)
        self._conn = None

    def has_ready_tasks(self) -> bool:
        if self._conn is None:
            raise DatabaseError("the task source is not open")
        try:
            with self._conn.cursor() as cur:
                cur.execute(self._sql)
                return bool(cur.fetchone()[0])
        except pymysql.MySQLError as exc:
            raise DatabaseError(f"checking {self.table} for ready tasks failed: {exc}") from exc

    def cancel_requests(self) -> list[int]:
        if self._conn is None:
            raise DatabaseError("the task source is not open")
        if not self._cancels_known:
            return []
        try:
            with self._conn.cursor() as cur:
                cur.execute(self._cancels_sql)
                return [int(row[0]) for row in cur.fetchall()]
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] == ER_BAD_FIELD_ERROR:
                self._cancels_known = False  # not upgraded: no cancel requests to find
                return []
            raise DatabaseError(f"checking {self.table} for cancel requests failed: {exc}") from exc

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        try:
            select.select([interrupt_fd], [], [], max(0.0, timeout))
        except (OSError, ValueError):
            pass
        return []
