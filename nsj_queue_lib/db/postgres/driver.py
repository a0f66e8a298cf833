"""PostgreSQL: psycopg 3 connections and pool, LISTEN/NOTIFY, advisory locks, SKIP LOCKED."""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import psycopg
import psycopg.errors
from psycopg.conninfo import make_conninfo

from nsj_queue_lib.db.dialect import DdlNames, task_end_channel
from nsj_queue_lib.db.driver import (
    CONNECT_TIMEOUT_SECONDS,
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE_SECONDS,
    KEEPALIVE_INTERVAL_SECONDS,
    ConnectionPool,
    Listener,
    TaskSource,
    driver_capabilities,
    exception_chain,
)
from nsj_queue_lib.db.postgres.conninfo import conninfo
from nsj_queue_lib.db.postgres.dsn import libpq_environment
from nsj_queue_lib.db.postgres.errors import wrap_driver_errors
from nsj_queue_lib.db.postgres.first_use import FirstUseHook
from nsj_queue_lib.db.postgres.inspection import PostgresInspectionStore
from nsj_queue_lib.db.postgres.listener import PostgresListener, listen_receives
from nsj_queue_lib.db.postgres.own_transaction import own_transaction
from nsj_queue_lib.db.wakeups import WakeupDriver
from nsj_queue_lib.dbapi import LegacyConnAttribute
from nsj_queue_lib.exceptions import ConfigError, DatabaseAccessError, DatabaseError
from nsj_queue_lib.identifiers import check_table_name, split_table_name
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.notify.checked import PROBE_TIMEOUT_SECONDS, CheckedListener
from nsj_queue_lib.settings import Settings

if TYPE_CHECKING:
    from nsj_queue_lib.db.postgres.legacy_keys import PostgresLegacyKeys
    from nsj_queue_lib.db.postgres.session import PostgresTaskSession
    from nsj_queue_lib.db.postgres.store import PostgresQueueStore

logger = get_logger("driver")

_CONNECT_OPTIONS: dict[str, Any] = {
    "connect_timeout": CONNECT_TIMEOUT_SECONDS,
    "keepalives": 1,
    "keepalives_idle": KEEPALIVE_IDLE_SECONDS,
    "keepalives_interval": KEEPALIVE_INTERVAL_SECONDS,
    "keepalives_count": KEEPALIVE_COUNT,
    # No automatic server-side prepared statements: one prepared in a transaction
    # may not exist on the server connection a transaction pooler gives the next.
    "prepare_threshold": None,
}


_TLS_CHECK = "DB_SSLMODE, DB_SSLROOTCERT, DB_SSLCERT, DB_SSLKEY"
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
    # TLS: a certificate that does not verify, or TLS the server does not offer.
    (re.compile(r"certificate verify failed|does not match host name"), _TLS_CHECK),
    (re.compile(r"server does not support SSL"), "DB_SSLMODE, the server's ssl setting"),
    (re.compile(r"certificate (file|present)|private key|root certificate"), _TLS_CHECK),
    (re.compile(r"requires a valid client certificate"), "DB_SSLCERT, DB_SSLKEY"),
)
POOL_NAME_PREFIX = "nsj_queue_lib:"
# The bodies of the functions of the table's enabled triggers, where db_gen's
# trigger names its channel (pg_notify('<channel>', ...)).
_TRIGGER_SOURCES = """
SELECT p.prosrc FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
WHERE t.tgrelid = to_regclass(%s) AND NOT t.tgisinternal AND t.tgenabled <> 'D'
"""
_NOTIFIED = re.compile(r"pg_notify\s*\(\s*'([^']*)'|\bNOTIFY\s+\"?(\w+)", re.IGNORECASE)


_TERMINATE = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE pid = %(pid)s AND (%(port)s::integer IS NULL OR client_port = %(port)s)
"""


def _socket_of(conn: psycopg.Connection) -> socket.socket:
    """A second handle on the connection's socket (closing it leaves the connection open)."""
    return socket.socket(fileno=os.dup(conn.fileno()))


def _local_port(conn: psycopg.Connection) -> int | None:
    """The connection's local TCP port (the server's client_port), None on a Unix socket."""
    try:
        with _socket_of(conn) as sock:
            if sock.family not in (socket.AF_INET, socket.AF_INET6):
                return None
            return int(sock.getsockname()[1])
    except (OSError, psycopg.Error):
        return None


def _cut(conn: psycopg.Connection) -> None:
    """End the connection at the socket, safely while another thread uses it."""
    try:
        with _socket_of(conn) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, psycopg.Error):
        pass  # closed already


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


class HandlerConnection(FirstUseHook, LegacyConnAttribute, psycopg.Connection[Any]):
    """The executors' connections: ``bd_conn.conn`` works as it did in 1.2.2 (dbapi.py); group
    commit sets a handler's savepoint at its first statement (first_use.py)."""


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


class PostgresDriver(WakeupDriver):
    name = "postgres"
    capabilities = driver_capabilities("POSTGRES")
    periodic_sql = "postgres"
    limits_module = "limits"
    settings: Settings

    def conninfo(self) -> str:
        """The libpq connection string of these settings (``db/postgres/conninfo.py``)."""
        return conninfo(self.settings)

    @classmethod
    def task_session_class(cls) -> type[PostgresTaskSession]:
        from nsj_queue_lib.db.postgres.session import PostgresTaskSession

        return PostgresTaskSession

    @classmethod
    def read_dsn(cls, dsn: str) -> dict[str, str]:
        return libpq_environment(dsn)

    legacy_keys_known = True

    def held_session(self, store: Any, locks: Any) -> Any:
        from nsj_queue_lib.db.postgres.held_groups import Ledger, held_group_sql
        from nsj_queue_lib.db.postgres.held_session import HeldTaskSession

        sql = held_group_sql(store.queue_table, store.partitioned)
        ledger = Ledger(
            lambda: self.connect(autocommit=True), sql, lambda: store.worker_name or "worker"
        )
        return HeldTaskSession(store, locks, ledger)

    def abandoned_groups(self, store: Any) -> Any:
        from nsj_queue_lib.db.postgres.held_groups import AbandonedGroups

        return AbandonedGroups(store)

    def legacy_keys(self, store: Any, conn: Any) -> PostgresLegacyKeys | None:
        from nsj_queue_lib.db.postgres.legacy_keys import PostgresLegacyKeys, came_from_1_2_2

        s = self.settings
        if s.queue_compat_1_2_2 == "OFF":
            return None
        if s.queue_compat_1_2_2 == "AUTO" and not came_from_1_2_2(conn, s.queue_table):
            return None
        if s.client_server_mode:
            # 1.2.2's locks live in its own server's memory: nothing to hold here.
            logger.warning(
                "queue=%s: table %s came from nsj-queue-lib 1.2.2, whose workers in "
                "CLIENT_SERVER_MODE lock tasks in their own server: run none of them next to "
                "this worker (docs/upgrading.md, client/server mode)",
                s.queue_name,
                s.queue_table,
            )
            return None
        return PostgresLegacyKeys(store)

    @classmethod
    def new_store(cls, queue_table: str, subscriber_table: str | None) -> PostgresQueueStore:
        from nsj_queue_lib.db.postgres.store import PostgresQueueStore

        return PostgresQueueStore(queue_table, subscriber_table)

    @classmethod
    def new_inspection_store(cls, queue_table: str) -> PostgresInspectionStore:
        return PostgresInspectionStore(queue_table)

    @classmethod
    def own_transaction(cls, conn: Any) -> AbstractContextManager[Any]:
        return own_transaction(conn)

    def move_to_partitioned(
        self, conn: Any, schema: str, queue: str, say: Callable[[str], None]
    ) -> str | None:
        from nsj_queue_lib.db.postgres import migration

        report = migration.migrate(conn, DdlNames(schema, queue), say=say)
        if report is None:
            return None
        return (
            f"the swap held the table {report.swap_seconds:.2f} s (try {report.swap_attempts}), "
            f"{report.moved} unfinished rows moved, about {report.legacy_rows} finished rows "
            f"kept in its legacy partition"
        )

    def run_script(self, conn: Any, script: str) -> int:
        # Without parameters the whole script travels as one simple query.
        with wrap_driver_errors("ddl"):
            conn.execute(script)
        return 1

    def _configure_executor(self, conn: psycopg.Connection) -> None:
        if not self.settings.queue_synchronous_commit:
            # Autocommit connection: the setting holds for the whole session.
            # Session state: check_session_state refuses it where sessions are
            # not kept (a pooler in transaction mode would apply it to whichever
            # client gets this server connection next, and not to our transactions).
            conn.execute("SET synchronous_commit = off")

    def check_session_state(self, conn: Any) -> None:
        if self.settings.queue_synchronous_commit:
            return  # nothing else of the worker's outlives a transaction (docs/how-to/poolers.md)
        if self.listen_receives():
            return
        raise ConfigError(
            {
                "QUEUE_SYNCHRONOUS_COMMIT": "false needs a session that keeps its settings, and "
                "this connection does not keep session state (a LISTEN through it never "
                "receives: a pooler in transaction mode?). Set QUEUE_SYNCHRONOUS_COMMIT=true, "
                "or connect directly or through a session-mode pool (docs/how-to/poolers.md)"
            }
        )

    def connect(self, autocommit: bool = True, executor: bool = False) -> psycopg.Connection:
        try:
            extra = self.executor_connect_options() if executor else {}
            conn = psycopg.connect(
                self.conninfo(), autocommit=autocommit, **{**_CONNECT_OPTIONS, **extra}
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

    def make_pool(self, size: int, spare: int = 1) -> ConnectionPool:
        from psycopg_pool import ConnectionPool as PsycopgPool

        pool_logger = logging.getLogger("psycopg.pool")
        if _POOL_FILTER not in pool_logger.filters:
            pool_logger.addFilter(_POOL_FILTER)

        # Autocommit: the store opens and ends the tasks' transactions with
        # explicit statements (see PostgresQueueStore.claim).
        pool: ConnectionPool = PsycopgPool(
            self.conninfo(),
            min_size=size,
            max_size=size + spare,
            kwargs={"autocommit": True, **_CONNECT_OPTIONS, **self.executor_connect_options()},
            connection_class=HandlerConnection,
            configure=self._configure_executor,
            name=f"{POOL_NAME_PREFIX}{self.settings.queue_name}",
            timeout=CONNECT_TIMEOUT_SECONDS * 2,
            open=False,
        )
        return pool

    def terminate_session(self, admin_conn: Any, victim_conn: Any) -> None:
        # Behind a pooler the connection's backend pid is the pooler's cancel key, not a server
        # process (by chance, another client's): the server session is matched by pid and by
        # the client port it sees. A connection no session matches (a pooler in between) is
        # cut at its socket instead: the pooler then closes the server connection, whose
        # transaction rolls back and whose locks go, as after pg_terminate_backend.
        # One its owner closed meanwhile (a handler that returned just after its timeout gave
        # it up) took its session along.
        if victim_conn.closed:
            return
        port = _local_port(victim_conn)
        try:
            pid = victim_conn.info.backend_pid
        except psycopg.Error:
            if victim_conn.closed:
                return
            raise
        with wrap_driver_errors("terminate_session"):
            ended = admin_conn.execute(_TERMINATE, {"pid": pid, "port": port}).fetchall()
        if not any(row[0] for row in ended):
            _cut(victim_conn)

    async def async_handler_connection(self, conn: Any) -> psycopg.AsyncConnection:
        from nsj_queue_lib.db.postgres.async_handler import handler_connection

        return await handler_connection(conn)

    def is_driver_error(self, exc: BaseException) -> bool:
        return isinstance(exc, (psycopg.Error, DatabaseError))

    def is_transient(self, exc: BaseException) -> bool:
        # A serialization failure: a row a locking read wanted was moved to another
        # partition meanwhile (a partitioned table, db/postgres/layout.py), or a deadlock.
        transient = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)
        return any(isinstance(e, transient) for e in exception_chain(exc))

    def check_wake_ups(self, conn: Any) -> str | None:
        if self.wakeup_mode() != "listen":
            return None  # polling, or the socket server listens with its own QUEUE_NAME
        with wrap_driver_errors("trigger_channels"):
            sources = [
                row[0] for row in conn.execute(_TRIGGER_SOURCES, (self.settings.queue_table,))
            ]
        # The end trigger's channel wakes wait_for_task, never a worker.
        end = task_end_channel(split_table_name(self.settings.queue_table)[1])
        found_channels = {a or b for source in sources for a, b in _NOTIFIED.findall(source)}
        channels = sorted(found_channels - {end})
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

    def listen_receives(self) -> bool:
        return listen_receives(lambda: self.connect(autocommit=True), PROBE_TIMEOUT_SECONDS)

    def native_listener(self) -> Listener:
        listener = PostgresListener(lambda: self.connect(autocommit=True), self.channel)
        return CheckedListener(
            listener, self.settings.queue_poll_interval, self.settings.queue_name
        )

    def task_source(self) -> TaskSource:
        from nsj_queue_lib.db.postgres.task_source import PostgresTaskSource

        table = check_table_name(self.settings.queue_table, "QUEUE_TABLE")
        conninfo = make_conninfo(
            self.conninfo(),
            application_name=server_application_name(self.settings.queue_name),
        )

        def connect() -> psycopg.Connection:
            return psycopg.connect(conninfo, autocommit=True, **_CONNECT_OPTIONS)

        return PostgresTaskSource(connect, table, self.channel)

    def is_connection_lost(self, conn: Any, exc: BaseException) -> bool:
        return connection_lost(conn, exc)


def connection_lost(conn: Any, exc: BaseException) -> bool:
    """Whether ``exc``, a driver error raised while a handler ran on ``conn``, is the loss
    of ``conn``. psycopg marks a connection broken when the server or the network ended
    it, never when the handler closed it; but its wait can fail first ("connection socket
    closed", an error of the socket) while libpq has not yet read the server's end:
    reading what the socket holds then lets libpq see it."""
    if not any(isinstance(e, (psycopg.Error, DatabaseError)) for e in exception_chain(exc)):
        return False
    if getattr(conn, "broken", False):
        return True
    if getattr(conn, "closed", True):  # closed by the handler (not broken), or no connection
        return False
    # Never blocks: what the socket holds, if anything. The server's last message, then
    # its end of the stream, which libpq reads by a read of its own.
    for _ in range(3):
        try:
            conn.pgconn.consume_input()
        except Exception:  # noqa: BLE001 - a dead socket: libpq marks the connection bad
            break
    return bool(getattr(conn, "broken", False))


DRIVER_CLASS = PostgresDriver
