"""PostgreSQL: psycopg 3 connections and pool, LISTEN/NOTIFY, advisory locks, SKIP LOCKED."""

from __future__ import annotations

import logging
import re
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from nsj_queue_lib.db.driver import (
    CONNECT_TIMEOUT_SECONDS,
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE_SECONDS,
    KEEPALIVE_INTERVAL_SECONDS,
    Capabilities,
    ConnectionPool,
    Driver,
    Listener,
    TaskSource,
)
from nsj_queue_lib.db.postgres.inspection import PostgresInspectionStore
from nsj_queue_lib.db.postgres.listener import PostgresListener
from nsj_queue_lib.db.postgres.store import PostgresQueueStore, wrap_driver_errors
from nsj_queue_lib.db.postgres.task_source import PostgresTaskSource
from nsj_queue_lib.exceptions import DatabaseAccessError, DatabaseError
from nsj_queue_lib.identifiers import check_table_name

_CONNECT_OPTIONS: dict[str, Any] = {
    "connect_timeout": CONNECT_TIMEOUT_SECONDS,
    "keepalives": 1,
    "keepalives_idle": KEEPALIVE_IDLE_SECONDS,
    "keepalives_interval": KEEPALIVE_INTERVAL_SECONDS,
    "keepalives_count": KEEPALIVE_COUNT,
}


# What a DSN may say; anything else (sslmode...) libpq reads from PG* variables.
_DSN_KEYS = {"host": "DB_HOST", "port": "DB_PORT", "dbname": "DB_BASE", "user": "DB_USER"}

# A refused login that waiting would never cure, by the server's message: libpq
# gives no SQLSTATE for a failed connection (28000, 28P01, 3D000, 42501), only
# its text, in the server's lc_messages (English by default). "too many
# connections for role ..." (53300) is an outage and matches none of these.
_ACCESS_REFUSED = (
    (re.compile(r"password authentication failed"), "DB_USER, DB_PASS"),
    (re.compile(r"\w+ authentication failed for user"), "DB_USER, DB_PASS"),
    (re.compile(r"no password supplied"), "DB_PASS"),
    (re.compile(r"no pg_hba\.conf entry"), "DB_USER, DB_BASE, the server's pg_hba.conf"),
    (re.compile(r'role ".*" (does not exist|is not permitted to log in)'), "DB_USER"),
    (re.compile(r'database ".*" does not exist'), "DB_BASE"),
    (re.compile(r"permission denied for database"), "DB_USER, DB_BASE"),
)
POOL_NAME_PREFIX = "nsj_queue_lib:"
# The bodies of the functions of the table's enabled triggers, where db_gen's
# trigger names its channel (pg_notify('<channel>', ...)).
_TRIGGER_SOURCES = """
SELECT p.prosrc FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
WHERE t.tgrelid = to_regclass(%s) AND NOT t.tgisinternal AND t.tgenabled <> 'D'
"""
_NOTIFIED = re.compile(r"pg_notify\s*\(\s*'([^']*)'|\bNOTIFY\s+\"?(\w+)", re.IGNORECASE)


def access_refused(exc: psycopg.Error) -> DatabaseAccessError | None:
    """The configuration error a failed connection reveals, or None for an outage."""
    text = str(exc).strip()
    reason = text.rsplit("FATAL:", 1)[-1].strip() if "FATAL:" in text else text
    for pattern, check in _ACCESS_REFUSED:
        if pattern.search(reason):
            return DatabaseAccessError(
                f"connecting to PostgreSQL refused: {reason} (check {check})"
            )
    return None


class _QuietPool(logging.Filter):
    """psycopg_pool logs every failed connection of its own (logger ``psycopg.pool``); the
    worker already says once per outage that the database is unreachable. Drops the
    lines of the worker's pools (named, and their threads named, ``nsj_queue_lib:...``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ours = (record.threadName or "").startswith(POOL_NAME_PREFIX) or (
            f"'{POOL_NAME_PREFIX}" in record.getMessage()
        )
        return not ours


_POOL_FILTER = _QuietPool()


def server_application_name(queue_name: str) -> str:
    """The ``application_name`` of the socket server's sessions."""
    return f"nsj_queue_lib_server:{queue_name}"[:63]


class PostgresDriver(Driver):
    name = "postgres"
    capabilities = Capabilities(
        listen_notify=True,
        skip_locked=True,
        session_locks=True,
        asynchronous_commit=True,
        transactional_ddl=True,
    )

    @classmethod
    def new_store(cls, queue_table: str, subscriber_table: str | None) -> PostgresQueueStore:
        return PostgresQueueStore(queue_table, subscriber_table)

    @classmethod
    def new_inspection_store(cls, queue_table: str) -> PostgresInspectionStore:
        return PostgresInspectionStore(queue_table)

    @classmethod
    def dsn_environment(cls, dsn: str) -> dict[str, str]:
        """A libpq conninfo string (``host=... dbname=...``) or URL (``postgresql://``)."""
        try:
            params = conninfo_to_dict(dsn.strip())
        except psycopg.Error:
            raise ValueError("not a valid libpq connection string or postgresql:// URL") from None
        unsupported = sorted(set(params) - set(_DSN_KEYS) - {"password"})
        if unsupported:
            raise ValueError(
                f"unsupported in the DSN: {', '.join(unsupported)} (libpq reads such settings "
                "from its PG* environment variables, e.g. PGSSLMODE)"
            )
        if not params.get("host") or not params.get("user"):
            raise ValueError("the DSN must name the host and the user")
        params.setdefault("dbname", params["user"])
        environment = {var: str(params[key]) for key, var in _DSN_KEYS.items() if params.get(key)}
        environment["DB_DRIVER"] = "POSTGRES"
        environment["DB_PASS"] = str(params.get("password") or "")
        return environment

    def run_script(self, conn: Any, script: str) -> int:
        # Without parameters the whole script travels as one simple query.
        with wrap_driver_errors("ddl"):
            conn.execute(script)
        return 1

    def _configure_executor(self, conn: psycopg.Connection) -> None:
        if not self.settings.queue_synchronous_commit:
            # Autocommit connection: the setting holds for the whole session.
            conn.execute("SET synchronous_commit = off")

    def connect(self, autocommit: bool = True, executor: bool = False) -> psycopg.Connection:
        try:
            conn = psycopg.connect(
                self.settings.postgres_conninfo(), autocommit=autocommit, **_CONNECT_OPTIONS
            )
        except psycopg.Error as exc:
            refused = access_refused(exc)
            if refused is not None:
                raise refused from exc
            raise DatabaseError(f"connecting to PostgreSQL failed: {exc}".strip()) from exc
        if executor:
            with wrap_driver_errors("configure_connection"):
                self._configure_executor(conn)
        return conn

    def make_pool(self, size: int) -> ConnectionPool:
        from psycopg_pool import ConnectionPool as PsycopgPool

        pool_logger = logging.getLogger("psycopg.pool")
        if _POOL_FILTER not in pool_logger.filters:
            pool_logger.addFilter(_POOL_FILTER)

        # Autocommit: the store opens and ends the tasks' transactions with
        # explicit statements (see PostgresQueueStore.claim).
        pool: ConnectionPool = PsycopgPool(
            self.settings.postgres_conninfo(),
            min_size=size,
            max_size=size + 1,
            kwargs={"autocommit": True, **_CONNECT_OPTIONS},
            configure=self._configure_executor,
            name=f"{POOL_NAME_PREFIX}{self.settings.queue_name}",
            timeout=CONNECT_TIMEOUT_SECONDS * 2,
            open=False,
        )
        return pool

    def terminate_session(self, admin_conn: Any, victim_conn: Any) -> None:
        with wrap_driver_errors("terminate_session"):
            admin_conn.execute("SELECT pg_terminate_backend(%s)", (victim_conn.info.backend_pid,))

    async def async_handler_connection(self, conn: Any) -> psycopg.AsyncConnection:
        from nsj_queue_lib.db.postgres.async_handler import handler_connection

        return await handler_connection(conn)

    def is_driver_error(self, exc: BaseException) -> bool:
        return isinstance(exc, (psycopg.Error, DatabaseError))

    def check_wake_ups(self, conn: Any) -> str | None:
        if self.settings.client_server_mode:
            return None  # the socket server listens, with its own QUEUE_NAME
        with wrap_driver_errors("trigger_channels"):
            sources = [
                row[0] for row in conn.execute(_TRIGGER_SOURCES, (self.settings.queue_table,))
            ]
        channels = sorted({a or b for source in sources for a, b in _NOTIFIED.findall(source)})
        if self.channel in channels:
            return None
        found = (
            f"notifies channel {', '.join(repr(c) for c in channels)}"
            if channels
            else "has no trigger that notifies"
        )
        return (
            f"QUEUE_NAME={self.settings.queue_name}: table {self.settings.queue_table} {found}, "
            f"not {self.channel!r}: new tasks wait for the next poll "
            f"(QUEUE_WAIT_NOTIFY_INTERVAL) instead of waking this worker "
            f"(is QUEUE_NAME the name given to db_gen?)"
        )

    def native_listener(self) -> Listener:
        return PostgresListener(lambda: self.connect(autocommit=True), self.channel)

    def task_source(self) -> TaskSource:
        table = check_table_name(self.settings.queue_table, "QUEUE_TABLE")
        conninfo = make_conninfo(
            self.settings.postgres_conninfo(),
            application_name=server_application_name(self.settings.queue_name),
        )

        def connect() -> psycopg.Connection:
            return psycopg.connect(conninfo, autocommit=True, **_CONNECT_OPTIONS)

        return PostgresTaskSource(connect, table, self.channel)


DRIVER_CLASS = PostgresDriver
