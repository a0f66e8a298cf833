"""PostgreSQL: psycopg 3 connections and pool, LISTEN/NOTIFY, advisory locks, SKIP LOCKED."""

from __future__ import annotations

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
from nsj_queue_lib.exceptions import DatabaseError
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
            raise DatabaseError(f"connecting to PostgreSQL failed: {exc}".strip()) from exc
        if executor:
            with wrap_driver_errors("configure_connection"):
                self._configure_executor(conn)
        return conn

    def make_pool(self, size: int) -> ConnectionPool:
        from psycopg_pool import ConnectionPool as PsycopgPool

        # Autocommit: the store opens and ends the tasks' transactions with
        # explicit statements (see PostgresQueueStore.claim).
        pool: ConnectionPool = PsycopgPool(
            self.settings.postgres_conninfo(),
            min_size=size,
            max_size=size + 1,
            kwargs={"autocommit": True, **_CONNECT_OPTIONS},
            configure=self._configure_executor,
            name=f"nsj_queue_lib:{self.settings.queue_name}",
            timeout=CONNECT_TIMEOUT_SECONDS * 2,
            open=False,
        )
        return pool

    def terminate_session(self, admin_conn: Any, victim_conn: Any) -> None:
        with wrap_driver_errors("terminate_session"):
            admin_conn.execute("SELECT pg_terminate_backend(%s)", (victim_conn.info.backend_pid,))

    def is_driver_error(self, exc: BaseException) -> bool:
        return isinstance(exc, (psycopg.Error, DatabaseError))

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
