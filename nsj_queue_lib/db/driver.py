"""The driver seam: the one object that knows which database a worker talks to.

Everything above ``db/`` (the runtime, its services, the socket server, the
client) asks a ``Driver`` for connections, pools, listeners and the queue's
store, and reads its ``Capabilities`` to choose a mechanism; none of it
tests which database it is. Each dialect has one driver, in
``db/<dialect>/driver.py``; ``make_driver`` picks it from the settings.

This module is also the one door to the dialects: ``_REGISTRY`` is the one
table of the DB_DRIVER values (their dialect's package, their ``Capabilities``,
which settings read through ``driver_capabilities`` without loading a driver),
and ``_dialect_module`` the one function that loads a dialect's module by
name. The shared code reaches the rest through the driver class (its group
ops, limits, periodic SQL, DSN syntax) or ``get_dialect`` (its DDL).

A driver is built from settings at start-up and never connects on its own:
building one is cheap and cannot fail for lack of a database.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import importlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from nsj_queue_lib.db.dialect import Dialect, notify_channel
from nsj_queue_lib.exceptions import DatabaseError

if TYPE_CHECKING:
    from nsj_queue_lib.db.limited_routine import LimitsDialect
    from nsj_queue_lib.db.queue_store import ClientStore, InspectionStore, QueueStore
    from nsj_queue_lib.db.task_session import Locks, TaskSession

# Dead peers are found by TCP keepalive in about 20 s instead of a connection
# (a LISTEN above all) that waits forever.
KEEPALIVE_IDLE_SECONDS = 10
KEEPALIVE_INTERVAL_SECONDS = 5
KEEPALIVE_COUNT = 2
CONNECT_TIMEOUT_SECONDS = 5


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What the database offers; the runtime picks its mechanisms from these."""

    listen_notify: bool  # wake-ups pushed by the database (else polling or the socket server)
    skip_locked: bool  # claims pass rows another transaction holds
    session_locks: bool  # advisory or named locks held by a session (liveness, services)
    asynchronous_commit: bool  # a session can commit without waiting for the disk
    # DDL runs inside a transaction (else each DDL statement commits on its own)
    transactional_ddl: bool = False
    # Group commit is on when QUEUE_BATCH_SIZE is unset (else only when it is set).
    group_commit_by_default: bool = False
    # The largest QUEUE_BATCH_SIZE the database takes (None: the settings' own bound).
    max_batch_size: int | None = None
    # DB_PORT when it is unset.
    default_port: int = 5432
    # The vacuum service looks after the queue table: its dead row versions, where they stay
    # until a VACUUM (InnoDB's purge thread removes its own), and its statistics, where the
    # database refreshes them late by itself (runtime/vacuum.py).
    table_maintenance: bool = False
    # A commit group can hold its claimed rows unwritten (QUEUE_ONE_WRITE,
    # docs/internals/one-write.md).
    held_groups: bool = False


@dataclasses.dataclass(frozen=True)
class _Registered:
    """One DB_DRIVER value: its dialect's package (``db/<package>/``), what the database
    offers, and the packages whose connections a caller may hand the client."""

    package: str
    capabilities: Capabilities
    # The scheme its URLs are written with, and the schemes of the DSNs it reads.
    url_scheme: str
    dsn_schemes: tuple[str, ...]
    connection_packages: tuple[str, ...] = ()
    # The ``vendor`` of the Django database backends on this database
    # (``nsj_queue_lib.contrib.django``; its worker's driver is db/<package>/django_shape.py).
    django_vendors: tuple[str, ...] = ()


# The one table of the databases: DB_DRIVER value -> its dialect. Nothing here imports
# a database driver: settings read the capabilities before any driver is loaded.
_REGISTRY: dict[str, _Registered] = {
    "POSTGRES": _Registered(
        "postgres",
        Capabilities(
            listen_notify=True,
            skip_locked=True,
            session_locks=True,
            asynchronous_commit=True,
            transactional_ddl=True,
            table_maintenance=True,
            group_commit_by_default=True,
            # A group's savepoints are subtransactions, of which PostgreSQL caches 64 per
            # transaction.
            max_batch_size=50,
            default_port=5432,
            held_groups=True,
        ),
        "postgresql",
        ("postgres", "postgresql"),
        ("psycopg", "psycopg2"),
        ("postgresql",),
    ),
    "MYSQL": _Registered(
        "mysql",
        Capabilities(
            listen_notify=False,
            skip_locked=True,
            session_locks=True,
            asynchronous_commit=False,
            # Statistics only: InnoDB recalculates them by itself once a tenth of the table
            # changed, which a table with weeks of history rarely reaches.
            table_maintenance=True,
            default_port=3306,
        ),
        "mysql",
        ("mysql", "mariadb"),
        ("pymysql", "MySQLdb"),
        ("mysql",),
    ),
    "SINGLE_STORE": _Registered(
        "singlestore",
        Capabilities(
            listen_notify=False,
            skip_locked=False,
            session_locks=False,
            asynchronous_commit=False,
            # No table maintenance: SingleStore keeps its statistics itself (autostats, on
            # by default), and its ANALYZE makes every plan that reads the table compile
            # again.
            default_port=3306,
        ),
        "singlestore",
        ("singlestore",),
    ),
}
# The DB_DRIVER values, in the order they are documented.
DRIVER_KEYS: tuple[str, ...] = tuple(_REGISTRY)


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
    # The package whose periodic.sql serves this dialect (SingleStore shares MySQL's).
    periodic_sql: ClassVar[str]
    # The module of this dialect that defines its LIMITS, what per-processo limits need of
    # it (db/limited_routine.py); None: the database has no limits table (then no pauses,
    # breakers nor limits either).
    limits_module: ClassVar[str | None] = None

    @classmethod
    def limits(cls) -> LimitsDialect | None:
        """The dialect's LIMITS, loaded when a worker or a limits statement first asks:
        ``nsjq status`` reads pauses and breakers, which need only ``limits_module``."""
        if cls.limits_module is None:
            return None
        found: LimitsDialect = _dialect_module(cls.name, cls.limits_module).LIMITS
        return found

    def __init__(self, settings: Any) -> None:
        # The worker's Settings (nsj_queue_lib/settings.py), which each dialect's driver
        # types; not named here, so that the settings may read this module's table.
        self.settings = settings

    @classmethod
    def own_transaction(cls, conn: Any) -> AbstractContextManager[Any]:
        """A transaction of its own for a client call's statements on a caller's connection
        in autocommit mode (db/own_transaction.py); nothing where the dialect cannot tell."""
        return contextlib.nullcontext()

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

    def held_session(self, store: Any, locks: Locks) -> TaskSession | None:
        """A task session whose groups hold their tasks unwritten (QUEUE_ONE_WRITE); None
        where the dialect has none."""
        return None

    def abandoned_groups(self, store: Any) -> Callable[[Any], int] | None:
        """What the retry service runs first: the tasks of held groups whose worker died
        written 'processando', for it to rescue (in the caller's transaction; how many)."""
        return None

    def legacy_keys(self, store: QueueStore, conn: Any) -> Any:
        """After ``store.bind(conn)``: how to hold 1.2.2's task keys too (a
        ``runtime.liveness.LegacyKeys``), or None when QUEUE_COMPAT_1_2_2 is off for this
        queue (the default: no 1.2.2 worker here)."""
        return None

    # -- connections --

    def executor_connect_options(self) -> dict[str, Any]:
        """Options added to the driver's connect() call of the executors' connections (the
        ones that run handlers); none by default. An integration whose handlers hand the
        connection to another library asks for that library's set-up here
        (``nsj_queue_lib.contrib.django``: Django's adapters on psycopg, the row counts
        Django's ORM reads on PyMySQL)."""
        return {}

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

    @classmethod
    def task_session_class(cls) -> type[TaskSession]:
        """The dialect's task session class (db/task_session.py); its ``groups``: whether it
        commits in groups (savepoints). Imported when a worker assembles its executors: nsjq
        and the client, which build a driver too, never load the workers' session code."""
        from nsj_queue_lib.db.task_session import TaskSession

        return TaskSession

    @classmethod
    def session(cls, store: Any, locks: Locks) -> TaskSession:
        """A worker's task session over ``store``, its liveness locks where ``locks`` says."""
        return cls.task_session_class()(store, locks)

    @classmethod
    def read_dsn(cls, dsn: str) -> dict[str, str] | None:
        """The DB_* variables of a DSN, read in the database's own syntax (libpq's); None where
        the database has none: ``db/dsn.py`` reads it as a URL. Raises ``ValueError``."""
        return None

    def server_family(self, conn: Any) -> str | None:
        """Which of its dialect's DDL variants (``db_gen --server``, SERVER_FAMILIES) the
        server behind ``conn`` needs; None for a dialect with one."""
        return None

    def move_to_partitioned(
        self, conn: Any, schema: str, queue: str, say: Callable[[str], None]
    ) -> str | None:
        """Move the plain queue table ``schema.queue`` to the partitioned layout while its
        workers run (``conn`` autocommit); a report of what was done, None when it is
        partitioned already. Dialects without that layout refuse."""
        raise ValueError(f"the partitioned layout is not available on {self.name}")

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

    @abc.abstractmethod
    def listener(self) -> Listener:
        """What the dispatcher waits on, by ``wakeup_mode`` (db/wakeups.py)."""

    @abc.abstractmethod
    def native_listener(self) -> Listener:
        """LISTEN where the database has it, else polling every QUEUE_POLL_INTERVAL."""

    @abc.abstractmethod
    def task_source(self) -> TaskSource:
        """The socket server's check-tasks access to the configured queue."""


def _registered(db_driver: str) -> _Registered:
    try:
        return _REGISTRY[db_driver.upper()]
    except KeyError:
        known = ", ".join(DRIVER_KEYS)
        raise ValueError(f"unknown DB_DRIVER {db_driver!r}; known: {known}") from None


def driver_capabilities(db_driver: str) -> Capabilities:
    """What the database of a DB_DRIVER value (any case) offers, without loading its driver.

    Raises ``ValueError`` naming the known values (``DRIVER_KEYS``) for any other."""
    return _registered(db_driver).capabilities


def dsn_schemes() -> dict[str, str]:
    """{URL scheme: DB_DRIVER value} of the DSNs the databases take."""
    return {scheme: key for key, entry in _REGISTRY.items() for scheme in entry.dsn_schemes}


def url_scheme(db_driver: str) -> str | None:
    """The scheme a DB_DRIVER value's URLs are written with (None: an unknown value)."""
    entry = _REGISTRY.get(db_driver)
    return None if entry is None else entry.url_scheme


def driver_module_name(db_driver: str) -> str:
    """``postgres``, ``mysql`` or ``singlestore`` for a DB_DRIVER value."""
    return _registered(db_driver).package


def _package(name: str) -> str:
    """The dialect's package of a DB_DRIVER value or a dialect name (``postgres``...)."""
    entry = _REGISTRY.get(name.upper())
    package = entry.package if entry is not None else name.lower()
    known = [entry.package for entry in _REGISTRY.values()]
    if package not in known:
        raise ValueError(f"unknown dialect {name!r}; known: {', '.join(known)}")
    return package


def _dialect_module(name: str, module: str) -> ModuleType:
    """The one door to a dialect's code: ``db/<package>/<module>.py`` of a DB_DRIVER value or
    dialect name, loaded by name so that only the configured database's driver is imported."""
    return importlib.import_module(f"{__package__}.{_package(name)}.{module}")


def driver_class(name: str) -> type[Driver]:
    """The driver class of a DB_DRIVER value or of a dialect (``Driver.name``)."""
    found: type[Driver] = _dialect_module(name, "driver").DRIVER_CLASS
    return found


def make_driver(settings: Any) -> Driver:
    """The driver of ``settings.db_driver`` (a ``Settings``)."""
    return driver_class(driver_module_name(settings.db_driver))(settings)


def django_db_driver(vendor: str) -> str | None:
    """The DB_DRIVER value of a Django database backend's ``vendor``; None: not one of ours."""
    return next((key for key, entry in _REGISTRY.items() if vendor in entry.django_vendors), None)


def django_driver(settings: Any, wrapper: Any) -> Driver:
    """The driver of a worker whose handlers lend their connection to Django's ORM: its
    executors' connections are set up as Django's own (``db/<dialect>/django_shape.py``).
    ``wrapper``: the Django connection (``django.db.connections[alias]``) whose settings
    they take. Raises ``ConfigError`` when that connection cannot share the worker's."""
    found: Driver = _dialect_module(settings.db_driver, "django_shape").DjangoDriver(
        settings, wrapper
    )
    return found


def get_dialect(name: str) -> Dialect:
    """The DDL of the dialect called ``name`` (``postgres``...) or, given a DB_DRIVER value,
    of its dialect. Loads no database driver (``db_gen`` prints DDL without one)."""
    dialect: Dialect = _dialect_module(name, "dialect").DIALECT
    return dialect


def _connection_driver(conn: object) -> type[Driver]:
    """The driver class of a caller's DB-API connection, by the package that made it."""
    # Along the class's bases: the worker hands handlers subclasses of the drivers'
    # connections (HandlerConnection), and a handler may enqueue on its bd_conn.
    roots = [(klass.__module__ or "").split(".")[0] for klass in type(conn).__mro__]
    for root in roots:
        for entry in _REGISTRY.values():
            if root in entry.connection_packages:
                return driver_class(entry.package)
    raise TypeError(
        f"unsupported connection type {type(conn).__module__}.{type(conn).__name__}: "
        "expected a psycopg 3, psycopg2 or PyMySQL connection"
    )


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


def connection_driver(conn: object) -> type[Driver]:
    """The driver class of a caller's DB-API connection (the package that made it)."""
    return _connection_driver(conn)


def dialect_errors(name: str) -> ModuleType:
    """A dialect's ``errors`` module (its ``wrap_driver_errors``), by dialect name."""
    return _dialect_module(name, "errors")
