"""The check-tasks thread's database access, one small class per driver.

A task source answers two questions: "does the queue have ready tasks?"
(``has_ready_tasks``: a pending task whose time has come, or a scheduled
retry that is due) and, where the database can push, "what did NOTIFY say on
the queue's channel?" (``wait``). PostgreSQL does both (psycopg 3, one
connection for the poll and one that only LISTENs); MySQL and SingleStore
poll through PyMySQL and have no push.

Errors leave as ``DatabaseError`` with the driver's error as ``__cause__``;
the thread closes the source and opens a new one after a back-off.
"""

from __future__ import annotations

import select
from typing import Any, Protocol

from nsj_queue_lib.db.dialect import notify_channel
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.identifiers import check_table_name
from nsj_queue_lib.settings import Settings

CONNECT_TIMEOUT_SECONDS = 5
# Same keepalive as the workers' connections: a vanished database is noticed
# in about 20 s instead of a LISTEN that waits forever.
_PG_KEEPALIVE: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 2,
}

# One index probe per status (both are partial indexes of the queue table).
# {now} is the dialect's current-time expression.
READY_TASKS_SQL = (
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM {table} WHERE status = 'pendente' AND data_hora <= {now}) "
    "OR EXISTS (SELECT 1 FROM {table} WHERE status = 'agendada' AND data_hora <= {now}) "
    "THEN 1 ELSE 0 END"
)


def application_name(queue_name: str) -> str:
    """The ``application_name`` of the server's PostgreSQL sessions."""
    return f"nsj_queue_lib_server:{queue_name}"[:63]


class TaskSource(Protocol):
    supports_listen: bool

    def open(self) -> None: ...

    def close(self) -> None: ...

    def has_ready_tasks(self) -> bool: ...

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        """Block until a notification, ``interrupt_fd`` readable, or the timeout; the payloads."""
        ...


def make_task_source(settings: Settings) -> TaskSource:
    if settings.db_driver == "POSTGRES":
        return PostgresTaskSource(settings)
    if settings.db_driver in ("MYSQL", "SINGLE_STORE"):
        return MysqlTaskSource(settings)
    raise ValueError(f"unknown DB_DRIVER {settings.db_driver!r}")


def _wait_interrupt(timeout: float, interrupt_fd: int) -> None:
    try:
        select.select([interrupt_fd], [], [], max(0.0, timeout))
    except (OSError, ValueError):
        pass


class PostgresTaskSource:
    supports_listen = True

    def __init__(self, settings: Settings):
        self.table = check_table_name(settings.queue_table, "QUEUE_TABLE")
        self.channel = notify_channel(settings.queue_name)
        self._settings = settings
        self._poll: Any = None
        self._listen: Any = None
        self._sql = READY_TASKS_SQL.format(table=self.table, now="clock_timestamp()")

    def _connect(self):
        import psycopg
        from psycopg.conninfo import make_conninfo

        conninfo = make_conninfo(
            self._settings.postgres_conninfo(),
            application_name=application_name(self._settings.queue_name),
        )
        return psycopg.connect(
            conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS, **_PG_KEEPALIVE
        )

    def open(self) -> None:
        import psycopg
        from psycopg import sql

        self.close()
        try:
            self._poll = self._connect()
            self._listen = self._connect()
            self._listen.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except psycopg.Error as exc:
            self.close()
            raise DatabaseError(
                f"connecting to PostgreSQL for the check-tasks thread failed: {exc}"
            ) from exc

    def close(self) -> None:
        for conn in (self._poll, self._listen):
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - closing a broken connection
                    pass
        self._poll = self._listen = None

    def has_ready_tasks(self) -> bool:
        import psycopg

        if self._poll is None:
            raise DatabaseError("the task source is not open")
        try:
            return bool(self._poll.execute(self._sql).fetchone()[0])
        except psycopg.Error as exc:
            raise DatabaseError(f"checking {self.table} for ready tasks failed: {exc}") from exc

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        import psycopg

        if self._listen is None:
            raise DatabaseError("the task source is not open")
        try:
            readable, _, _ = select.select(
                [self._listen.fileno(), interrupt_fd], [], [], max(0.0, timeout)
            )
        except (OSError, ValueError) as exc:
            raise DatabaseError(f"waiting on the LISTEN connection failed: {exc}") from exc
        if self._listen.fileno() not in readable:
            return []
        try:
            payloads = [
                n.payload for n in self._listen.notifies(timeout=0) if n.channel == self.channel
            ]
            if not payloads:
                # Readable without a notification: a server message or a
                # closed socket. A round trip tells which.
                self._listen.execute("SELECT 1")
        except psycopg.Error as exc:
            raise DatabaseError(f"the LISTEN connection was lost: {exc}") from exc
        return payloads


class MysqlTaskSource:
    """MySQL/MariaDB and SingleStore: polling only (they have no LISTEN/NOTIFY)."""

    supports_listen = False

    def __init__(self, settings: Settings):
        self.table = check_table_name(settings.queue_table, "QUEUE_TABLE")
        self._settings = settings
        self._conn: Any = None
        self._sql = READY_TASKS_SQL.format(table=self.table, now="CURRENT_TIMESTAMP(6)")

    def open(self) -> None:
        import pymysql

        self.close()
        s = self._settings
        try:
            self._conn = pymysql.connect(
                host=s.db_host,
                port=s.db_port,
                user=s.db_user,
                password=s.db_pass or "",
                database=s.db_name,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                read_timeout=60,
                write_timeout=60,
            )
        except pymysql.MySQLError as exc:
            raise DatabaseError(
                f"connecting to {s.db_driver} for the check-tasks thread failed: {exc}"
            ) from exc

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a connection that may be broken
                pass
            self._conn = None

    def has_ready_tasks(self) -> bool:
        import pymysql

        if self._conn is None:
            raise DatabaseError("the task source is not open")
        try:
            with self._conn.cursor() as cur:
                cur.execute(self._sql)
                return bool(cur.fetchone()[0])
        except pymysql.MySQLError as exc:
            raise DatabaseError(f"checking {self.table} for ready tasks failed: {exc}") from exc

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        _wait_interrupt(timeout, interrupt_fd)
        return []
