"""MySQL >= 8.0 and MariaDB >= 10.6: PyMySQL connections, named locks, SKIP LOCKED, polling."""

from __future__ import annotations

import socket
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import pymysql
import pymysql.connections

from nsj_queue_lib.db.driver import (
    CONNECT_TIMEOUT_SECONDS,
    ConnectionPool,
    Listener,
    TaskSource,
    driver_capabilities,
    exception_chain,
)
from nsj_queue_lib.db.mysql.dialect import split_script
from nsj_queue_lib.db.mysql.errors import error_code, wrap_driver_errors
from nsj_queue_lib.db.mysql.first_use import FirstUseHook
from nsj_queue_lib.db.mysql.galera import check_galera, is_transient_error
from nsj_queue_lib.db.mysql.inspection import MysqlInspectionStore
from nsj_queue_lib.db.mysql.names import server_family
from nsj_queue_lib.db.mysql.own_transaction import own_transaction
from nsj_queue_lib.db.mysql.pool import SimplePool
from nsj_queue_lib.db.mysql.tls import ssl_options, tls_refused
from nsj_queue_lib.db.wakeups import WakeupDriver
from nsj_queue_lib.dbapi import LegacyConnAttribute
from nsj_queue_lib.exceptions import DatabaseAccessError, DatabaseError
from nsj_queue_lib.identifiers import check_table_name
from nsj_queue_lib.notify.polling import PollingListener
from nsj_queue_lib.settings import Settings

if TYPE_CHECKING:
    from nsj_queue_lib.db.mysql.session import MysqlTaskSession
    from nsj_queue_lib.db.mysql.store import MysqlQueueStore

# Every worker session runs in UTC, so that NOW(6) and the TIMESTAMP columns
# never meet a daylight-saving fold.
SESSION_TIME_ZONE = "SET time_zone = '+00:00'"
# The dispatcher's and the maintenance services' sessions run in READ
# COMMITTED, as on PostgreSQL: their range updates and deletes lock only the
# rows they change, no gaps an enqueuer would wait on.
SESSION_ISOLATION = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"
# The executors' sessions, whose transactions hold the claim and the
# handlers' work, run in REPEATABLE READ: MySQL's own default, what handlers
# got from nsj-queue-lib 1.2.2, and the cheaper claim on MariaDB (see
# docs/benchmarks.md). The claim's locking read then also locks the gap
# before the row it takes, until its commit in the same round trip; it never
# waits on a lock itself.
EXECUTOR_ISOLATION = "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"
# A refused login that waiting would never cure: error number -> what to check.
ACCESS_REFUSED = {
    1044: "DB_USER, DB_BASE",  # ER_DBACCESS_DENIED_ERROR
    1045: "DB_USER, DB_PASS",  # ER_ACCESS_DENIED_ERROR
    1049: "DB_BASE",  # ER_BAD_DB_ERROR
}
# The connection itself is gone: server gone away, lost during a query, killed,
# server shutting down, disconnected by the server.
CONNECTION_LOST = {2006, 2013, 2055, 1927, 1053, 4031}
# KILL of a session the server no longer has (ER_NO_SUCH_THREAD).
NO_SUCH_SESSION = 1094


def _cut(conn: Any) -> None:
    """End the connection at its socket, safely while another thread uses it."""
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return  # closed already
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # closed meanwhile


def configure_session(conn: Any, executor: bool) -> None:
    """Once per worker connection, right after connecting."""
    with wrap_driver_errors("configure_connection"), conn.cursor() as cur:
        cur.execute(SESSION_TIME_ZONE)
        cur.execute(EXECUTOR_ISOLATION if executor else SESSION_ISOLATION)


class HandlerConnection(FirstUseHook, LegacyConnAttribute, pymysql.connections.Connection):
    """Every worker connection: ``bd_conn.conn`` works in handlers as in 1.2.2 (dbapi.py);
    group commit sets a handler's savepoint before its first statement (first_use.py)."""


class MysqlFamilyDriver(WakeupDriver):
    """PyMySQL connections and polling, shared by MySQL/MariaDB and SingleStore."""

    database_name = "MySQL"
    periodic_sql = "mysql"
    settings: Settings

    def _raw_connect(self, autocommit: bool, **options: Any) -> Any:
        s = self.settings
        return HandlerConnection(
            host=s.db_host,
            port=s.db_port if isinstance(s.db_port, int) else s.db_port[0],
            user=s.db_user,
            password=s.db_pass or "",
            database=s.db_name,
            autocommit=autocommit,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            charset="utf8mb4",
            **ssl_options(s),
            **options,
        )

    @classmethod
    def new_inspection_store(cls, queue_table: str) -> MysqlInspectionStore:
        return MysqlInspectionStore(queue_table)

    @classmethod
    def own_transaction(cls, conn: Any) -> AbstractContextManager[Any]:
        return own_transaction(conn)

    def configure(self, conn: Any, executor: bool) -> None:
        configure_session(conn, executor)

    def run_script(self, conn: Any, script: str) -> int:
        """Statement by statement (``DELIMITER`` lines honoured); each DDL statement commits."""
        statements = split_script(script)
        with wrap_driver_errors("ddl"), conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
        return len(statements)

    def connect(self, autocommit: bool = True, executor: bool = False) -> Any:
        try:
            extra = self.executor_connect_options() if executor else {}
            conn = self._raw_connect(autocommit, **extra)
        except pymysql.err.Error as exc:
            code, *text = exc.args or (None,)
            refused = tls_refused(exc)
            if refused is not None:
                raise DatabaseAccessError(
                    f"connecting to {self.database_name} refused: {refused}"
                ) from exc
            if code in ACCESS_REFUSED:
                reason = text[0] if text else str(exc)
                raise DatabaseAccessError(
                    f"connecting to {self.database_name} refused: {reason} "
                    f"(check {ACCESS_REFUSED[code]})"
                ) from exc
            raise DatabaseError(f"connecting to {self.database_name} failed: {exc}") from exc
        self.configure(conn, executor)
        return conn

    def make_pool(self, size: int, spare: int = 1) -> ConnectionPool:
        return SimplePool(
            lambda: self.connect(autocommit=True, executor=True),
            size + spare,
            timeout=CONNECT_TIMEOUT_SECONDS * 2,
        )

    def terminate_session(self, admin_conn: Any, victim_conn: Any) -> None:
        # A session the server does not know ended already (its owner closed it while the
        # KILL was on its way: a handler that returned just after its timeout gave it up),
        # or is not this server's (a proxy numbers its own): its socket is cut as well, so
        # that whatever is behind it ends too. Either way it holds nothing any more.
        try:
            with wrap_driver_errors("terminate_session"), admin_conn.cursor() as cur:
                cur.execute("KILL CONNECTION %s", (int(victim_conn.thread_id()),))
        except DatabaseError as exc:
            if not any(error_code(e) == NO_SUCH_SESSION for e in exception_chain(exc)):
                raise
            _cut(victim_conn)

    def is_driver_error(self, exc: BaseException) -> bool:
        return isinstance(exc, (pymysql.err.Error, DatabaseError))

    def is_transient(self, exc: BaseException) -> bool:
        # Deadlock / lock wait timeout, and on Galera a certification failure or a brute-force
        # abort (reported as 1213) or a node not ready yet (1047): galera.py.
        return any(is_transient_error(e) for e in exception_chain(exc))

    def is_connection_lost(self, conn: Any, exc: BaseException) -> bool:
        # A lost connection is no longer open; one the handler closed raised no such error.
        return not getattr(conn, "open", True) and any(
            isinstance(e, pymysql.err.OperationalError) and e.args and e.args[0] in CONNECTION_LOST
            for e in exception_chain(exc)
        )

    def check_settings(self) -> dict[str, str]:
        problems = super().check_settings()
        s = self.settings
        if len(s.hosts()) > 1 or isinstance(s.db_port, tuple):
            problems["DB_HOST"] = f"can name one host only with DB_DRIVER={s.db_driver}"
        if s.db_target_session_attrs is not None:
            problems["DB_TARGET_SESSION_ATTRS"] = "is for PostgreSQL only"
        return problems

    def native_listener(self) -> Listener:
        return PollingListener(self.settings.queue_poll_interval)

    def task_source(self) -> TaskSource:
        from nsj_queue_lib.db.mysql.task_source import MysqlTaskSource

        table = check_table_name(self.settings.queue_table, "QUEUE_TABLE")

        def connect() -> Any:
            return self._raw_connect(True, read_timeout=60, write_timeout=60)

        return MysqlTaskSource(connect, table, self.database_name)


class MysqlDriver(MysqlFamilyDriver):
    name = "mysql"
    capabilities = driver_capabilities("MYSQL")
    limits_module = "dialect"

    @classmethod
    def task_session_class(cls) -> type[MysqlTaskSession]:
        from nsj_queue_lib.db.mysql.session import MysqlTaskSession

        return MysqlTaskSession

    @classmethod
    def new_store(cls, queue_table: str, subscriber_table: str | None) -> MysqlQueueStore:
        from nsj_queue_lib.db.mysql.store import MysqlQueueStore

        return MysqlQueueStore(queue_table, subscriber_table)

    def move_to_partitioned(
        self, conn: Any, schema: str, queue: str, say: Callable[[str], None]
    ) -> str | None:
        store = self.new_store(f"{schema}.{queue}", None)
        if store.is_partitioned(conn):
            return None  # partitioned already: its upgrade script follows
        raise ValueError(
            f"moving a plain {self.name} table to the partitioned layout is not built yet "
            "(docs/internals/storage.md, step 7): create a new queue with db_gen --layout "
            "partitioned"
        )

    def check_topology(self, conn: Any) -> str | None:
        """MariaDB Galera: refused unless the liveness locks hold cluster-wide (galera.py)."""
        s = self.settings
        return check_galera(conn, s.client_server_mode, s.queue_galera_writer_node)

    def server_family(self, conn: Any) -> str | None:
        return server_family(conn)  # SELECT VERSION(): 'mariadb' or 'mysql'


DRIVER_CLASS = MysqlDriver
