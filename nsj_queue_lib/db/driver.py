"""The driver seam: the one object that knows which database a worker talks to.

Everything above ``db/`` (the runtime, its services, the socket server, the
client) asks a ``Driver`` for connections, pools, listeners and the queue's
store, and reads its ``Capabilities`` to choose a mechanism; none of it
tests which database it is. Each dialect has one driver, in
``db/<dialect>/driver.py``; ``make_driver`` picks it from the settings.

A driver is built from settings at start-up and never connects on its own:
building one is cheap and cannot fail for lack of a database.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from nsj_queue_lib.db.dialect import notify_channel

# The DB_DRIVER registry lives in a module that imports nothing of the package, so that
# the settings can read it; its names are this module's too.
from nsj_queue_lib.db.registry import DRIVER_KEYS as DRIVER_KEYS
from nsj_queue_lib.db.registry import Capabilities as Capabilities
from nsj_queue_lib.db.registry import driver_capabilities as driver_capabilities
from nsj_queue_lib.exceptions import DatabaseError

if TYPE_CHECKING:
    from nsj_queue_lib.db.queue_store import ClientStore, InspectionStore, QueueStore
    from nsj_queue_lib.runtime.liveness import LegacyKeys
    from nsj_queue_lib.settings import Settings

DRIVER_NAMES = {"POSTGRES": "postgres", "MYSQL": "mysql", "SINGLE_STORE": "singlestore"}
# The dialect of a caller's connection, by the package of its driver.
_CONNECTION_DIALECTS = {
    "psycopg": "postgres",
    "psycopg2": "postgres",
    "pymysql": "mysql",
    "MySQLdb": "mysql",
}
# Dead peers are found by TCP keepalive in about 20 s instead of a connection
# (a LISTEN above all) that waits forever.
KEEPALIVE_IDLE_SECONDS = 10
KEEPALIVE_INTERVAL_SECONDS = 5
KEEPALIVE_COUNT = 2
CONNECT_TIMEOUT_SECONDS = 5


class Listener(Protocol):
    """Tells the dispatcher when there may be work: LISTEN, polling or the socket server."""

    def open(self) -> None: ...

    def close(self) -> None: ...

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        """Block until a wake-up, ``interrupt_fd`` readable, or the timeout; the payloads."""
        ...


class ConnectionPool(Protocol):
    """The executors' connections (psycopg_pool's surface, as far as the runtime uses it)."""

    def open(self, wait: bool = False) -> None: ...

    def getconn(self) -> Any: ...

    def putconn(self, conn: Any) -> None: ...

    def connection(self) -> AbstractContextManager[Any]: ...

    def check(self) -> None: ...

    def close(self, timeout: float = 5.0) -> None: ...

    def get_stats(self) -> dict[str, int]:
        """At least ``pool_max``, ``pool_size`` (connections open) and ``pool_available``
        (idle among them), as psycopg_pool gives them."""
        ...


class TaskSource(Protocol):
    """The socket server's view of a queue: are tasks ready, and what did NOTIFY say."""

    supports_listen: bool

    def open(self) -> None: ...

    def close(self) -> None: ...

    def has_ready_tasks(self) -> bool: ...

    def cancel_requests(self) -> list[int]:
        """Running attempts with a cancel request, where no notification announces them (the
        server pushes them); empty where the database notifies (the server relays that)."""
        ...

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        """Block until a notification, ``interrupt_fd`` readable, or the timeout; the payloads."""
        ...


class Driver(abc.ABC):
    """One dialect's connections, session set-up, wake-ups and store."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # -- configuration --

    def check_settings(self) -> dict[str, str]:
        """Settings this database cannot honour: {variable: why}, empty when all is well."""
        problems: dict[str, str] = {}
        s = self.settings
        if not self.capabilities.session_locks and not s.client_server_mode:
            problems["CLIENT_SERVER_MODE"] = (
                f"must be true with DB_DRIVER={s.db_driver}: the database has no session locks "
                "nor LISTEN, the socket server provides them (python -m nsj_queue_lib.server)"
            )
        if s.queue_compat_1_2_2 == "ON" and (s.client_server_mode or not self.legacy_keys_known):
            problems["QUEUE_COMPAT_1_2_2"] = (
                "can be ON with DB_DRIVER=POSTGRES and CLIENT_SERVER_MODE=false only "
                "(docs/upgrading.md says how to roll other set-ups)"
            )
        if s.queue_wakeup == "listen" and not self.capabilities.listen_notify:
            problems["QUEUE_WAKEUP"] = (
                f"cannot be 'listen' with DB_DRIVER={s.db_driver}: the database has no "
                "LISTEN/NOTIFY (use 'poll', or 'server' with CLIENT_SERVER_MODE=true)"
            )
        if not s.queue_synchronous_commit and not self.capabilities.asynchronous_commit:
            problems["QUEUE_SYNCHRONOUS_COMMIT"] = (
                "can be false on PostgreSQL only (on MySQL the equivalent, "
                "innodb_flush_log_at_trx_commit, is a server setting)"
            )
        return problems

    # Whether this database knows nsj-queue-lib 1.2.2's task keys (legacy_keys).
    legacy_keys_known: ClassVar[bool] = False

    def legacy_keys(self, store: QueueStore, conn: Any) -> LegacyKeys | None:
        """After ``store.bind(conn)``: how to hold 1.2.2's task keys too, or None when
        QUEUE_COMPAT_1_2_2 is off for this queue (the default: no 1.2.2 worker here)."""
        return None

    # -- connections --

    @abc.abstractmethod
    def connect(self, autocommit: bool = True, executor: bool = False) -> Any:
        """A new worker connection, its session set up (``executor``: one that runs handlers).

        Raises ``DatabaseError`` when the database cannot be reached.
        """

    @abc.abstractmethod
    def make_pool(self, size: int, spare: int = 1) -> ConnectionPool:
        """The executors' pool: ``size`` connections plus ``spare`` opened on demand (recording
        failures, writing progress, replacing the connections of abandoned handlers)."""

    @abc.abstractmethod
    def terminate_session(self, admin_conn: Any, victim_conn: Any) -> None:
        """End another connection's server session: its transaction rolls back, its locks go."""

    def is_driver_error(self, exc: BaseException) -> bool:
        """Whether ``exc`` comes from this database's driver (an outage, not a bug)."""
        return isinstance(exc, DatabaseError)

    def is_transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` (or an error it wraps) is one the same work may simply be tried
        again after: a deadlock, a lock wait timeout, a certification failure. Default: no."""
        return False

    def is_connection_lost(self, conn: Any, exc: BaseException) -> bool:
        """Whether ``exc``, raised while a handler ran on ``conn``, is the loss of ``conn``
        itself (server shutdown, failover, network), not the handler's own error."""
        return False

    async def async_handler_connection(self, conn: Any) -> Any:
        """The ``bd_conn`` an ``async def`` handler gets for the executor's ``conn``, its
        session and transaction being ``conn``'s (called while ``conn`` is idle).

        Default: ``conn`` with its calls run in a thread (``db/threaded.py``).
        """
        from nsj_queue_lib.db.threaded import ThreadedConnection

        return ThreadedConnection(conn)

    # -- the queue --

    @classmethod
    @abc.abstractmethod
    def new_store(cls, queue_table: str, subscriber_table: str | None) -> QueueStore:
        """A store of this dialect for a queue table (and its subscriber table)."""

    def store(self) -> QueueStore:
        """The store of the configured queue (QUEUE_TABLE, QUEUE_SUBSCRIBER_TABLE)."""
        return self.new_store(self.settings.queue_table, self.settings.queue_subscriber_table)

    @classmethod
    @abc.abstractmethod
    def new_inspection_store(cls, queue_table: str) -> InspectionStore:
        """What the ``nsjq`` command reads (and retries) of a queue table, in this dialect."""

    def inspection_store(self) -> InspectionStore:
        """The inspection store of the configured queue (QUEUE_TABLE)."""
        return self.new_inspection_store(self.settings.queue_table)

    def server_family(self, conn: Any) -> str | None:
        """Which of its dialect's DDL variants (``db_gen --server``, SERVER_FAMILIES) the
        server behind ``conn`` needs; None for a dialect with one."""
        return None

    @abc.abstractmethod
    def run_script(self, conn: Any, script: str) -> int:
        """Run a DDL script (``db_gen``'s output) on ``conn``; the number of statements sent.

        Inside the connection's transaction where the database has transactional DDL.
        """

    # -- wake-ups --

    @property
    def channel(self) -> str:
        return notify_channel(self.settings.queue_name)

    def check_wake_ups(self, conn: Any) -> str | None:
        """At start, after ``bind``: why new tasks would not wake this worker at once (a
        warning to log), or None. Default: nothing to check (polling)."""
        return None

    def wakeup_mode(self) -> str:
        """QUEUE_WAKEUP, or what it defaults to: the socket server in client/server mode,
        else LISTEN where the database has it, else polling."""
        if self.settings.queue_wakeup:
            return self.settings.queue_wakeup
        if self.settings.client_server_mode:
            return "server"
        return "listen" if self.capabilities.listen_notify else "poll"

    def check_session_state(self, conn: Any) -> None:
        """At start, after ``bind``: raise ``ConfigError`` when a setting needs session state
        the connection does not keep (behind a pooler in transaction mode). Default: none."""
        return None

    def check_topology(self, conn: Any) -> str | None:
        """At start, after ``bind``: raise ``ConfigError`` when the database's topology breaks
        the liveness scheme the settings chose (MariaDB Galera: GET_LOCK holds on one node
        only); else a line to log about the topology, or None. Default: nothing to check."""
        return None

    def listen_receives(self) -> bool:
        """Whether a LISTEN through these settings hears a NOTIFY sent from another connection
        (False where the database has no LISTEN). Raises ``DatabaseError`` when unreachable."""
        return False

    def listener(self) -> Listener:
        """What the dispatcher waits on, by ``wakeup_mode``: the socket server, polling every
        QUEUE_POLL_INTERVAL, or the database's LISTEN, checked (``notify/checked.py``)."""
        mode = self.wakeup_mode()
        if mode == "server":
            from nsj_queue_lib.notify.server_listener import ServerListener

            return ServerListener(self.settings)
        if mode == "poll":
            from nsj_queue_lib.notify.polling import PollingListener

            return PollingListener(self.settings.queue_poll_interval)
        return self.native_listener()

    @abc.abstractmethod
    def native_listener(self) -> Listener:
        """LISTEN where the database has it, else polling every QUEUE_POLL_INTERVAL."""

    @abc.abstractmethod
    def task_source(self) -> TaskSource:
        """The socket server's check-tasks access to the configured queue."""


def driver_module_name(db_driver: str) -> str:
    """``postgres``, ``mysql`` or ``singlestore`` for a DB_DRIVER value."""
    try:
        return DRIVER_NAMES[db_driver.upper()]
    except KeyError:
        known = ", ".join(DRIVER_NAMES)
        raise ValueError(f"unknown DB_DRIVER {db_driver!r}; known: {known}") from None


def _driver_class(dialect: str) -> type[Driver]:
    module = importlib.import_module(f"nsj_queue_lib.db.{dialect}.driver")
    driver_class: type[Driver] = module.DRIVER_CLASS
    return driver_class


def make_driver(settings: Settings) -> Driver:
    """The driver of ``settings.db_driver``."""
    return _driver_class(driver_module_name(settings.db_driver))(settings)


def _connection_driver(conn: object) -> type[Driver]:
    """The driver class of a caller's DB-API connection, by the package that made it."""
    # Along the class's bases: the worker hands handlers subclasses of the drivers'
    # connections (HandlerConnection), and a handler may enqueue on its bd_conn.
    roots = ((klass.__module__ or "").split(".")[0] for klass in type(conn).__mro__)
    dialect = next((_CONNECTION_DIALECTS[r] for r in roots if r in _CONNECTION_DIALECTS), None)
    if dialect is None:
        raise TypeError(
            f"unsupported connection type {type(conn).__module__}.{type(conn).__name__}: "
            "expected a psycopg 3, psycopg2 or PyMySQL connection"
        )
    return _driver_class(dialect)


def client_store(conn: object, queue_table: str, subscriber_table: str | None) -> ClientStore:
    """The store for a caller's DB-API connection, chosen by the driver that made it."""
    own_store = getattr(conn, "_nsj_client_store", None)  # nsj_queue_lib.testing's connection
    if own_store is not None:
        store: ClientStore = own_store(queue_table, subscriber_table)
        return store
    return _connection_driver(conn).new_store(queue_table, subscriber_table)


def client_inspection_store(conn: object, queue_table: str) -> InspectionStore:
    """The inspection store (``nsjq``'s operations) for a caller's DB-API connection."""
    return _connection_driver(conn).new_inspection_store(queue_table)


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during."""
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


def close_quietly(conn: Any) -> None:
    """Close a connection that may be broken already."""
    if conn is None:
        return
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - closing a connection that may be broken
        pass
