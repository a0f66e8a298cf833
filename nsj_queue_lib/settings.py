"""Settings: one frozen object built from the environment at start-up.

Nothing here runs at import time. ``Settings.from_env(os.environ)`` reads
every variable of the contract, checks each one's form, and raises a single
``ConfigError`` naming every bad variable at once. What a database cannot
honour (QUEUE_SYNCHRONOUS_COMMIT=false on MySQL, SingleStore without
CLIENT_SERVER_MODE) is its driver's to say (``Driver.check_settings``), when a
worker starts. Workers and the server build settings when they start; code
can build a ``Settings`` directly instead.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

from nsj_queue_lib.db.dsn import dsn_variables, masked_url, port_text
from nsj_queue_lib.exceptions import ConfigError, InvalidIdentifierError
from nsj_queue_lib.identifiers import check_identifier, check_table_name

DRIVERS = ("POSTGRES", "MYSQL", "SINGLE_STORE")
DEFAULT_PORTS = {"POSTGRES": 5432, "MYSQL": 3306, "SINGLE_STORE": 3306}
EVERY_FIVE_MINUTES = tuple(range(0, 60, 5))

LOG_FORMATS = ("text", "json")
# QUEUE_COMPAT_1_2_2: hold nsj-queue-lib 1.2.2's task keys too (docs/upgrading.md).
COMPAT_MODES = ("AUTO", "ON", "OFF")
# libpq's sslmode values, from no TLS to a verified certificate naming the host.
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
# libpq's target_session_attrs values (PostgreSQL only).
TARGET_SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")
# The whole connection as one string; both names are read, they must agree.
DSN_VARIABLES = ("DATABASE_URL", "DB_DSN")

# The older names of the DB_* variables, still read.
_ALIASES = {
    "DB_DRIVER": ("DATABASE_DRIVER",),
    "DB_HOST": ("DATABASE_HOST",),
    "DB_PORT": ("DATABASE_PORT",),
    "DB_BASE": ("DATABASE_NAME",),
    "DB_USER": ("DATABASE_USER",),
    "DB_PASS": ("DATABASE_PASS",),
}
WAKEUP_MODES = ("listen", "poll", "server")
# The largest commit group. On PostgreSQL a group's savepoints are
# subtransactions, of which it caches 64 per transaction; past that every
# snapshot of every session gets slower. InnoDB has no such cache, and
# MySQL/MariaDB, which pay more per statement than per row, drain faster with
# larger groups (docs/group-commit.md).
MAX_BATCH_SIZE = 200
MAX_BATCH_SIZE_POSTGRES = 50
# QUEUE_BATCH_SIZE when unset, where group commit applies (docs/group-commit.md).
DEFAULT_BATCH_SIZE = 20

_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a worker or the socket server needs, with the original defaults."""

    # Database connection (DB_* or DATABASE_* variables, or DATABASE_URL / DB_DSN).
    db_host: str  # PostgreSQL: several hosts, comma-separated, are tried in order
    db_name: str
    db_user: str
    db_pass: str = dataclasses.field(default="", repr=False)
    db_port: int | tuple[int, ...] = 5432  # a tuple: one port per host of db_host
    db_driver: str = "POSTGRES"
    # TLS (libpq's names, mapped to PyMySQL on MySQL); None: the driver's default.
    db_sslmode: str | None = None
    db_sslrootcert: str | None = None
    db_sslcert: str | None = None
    db_sslkey: str | None = None
    # PostgreSQL with several hosts: which server a session must reach (libpq's).
    db_target_session_attrs: str | None = None

    # The queue.
    queue_name: str = ""
    queue_table: str = ""
    queue_subscriber_table: str | None = None

    # Retries and dead letter.
    queue_max_retry: int = 100
    queue_base_interval_retry: float = 5.0  # minutes, fractions allowed

    # Maintenance schedules: minutes of the hour, or seconds between runs.
    queue_minute_retry_thread: tuple[int, ...] = EVERY_FIVE_MINUTES
    queue_minute_purge_thread: tuple[int, ...] = (0,)
    queue_minute_notify_thread: tuple[int, ...] = EVERY_FIVE_MINUTES
    queue_retry_thread_interval: float | None = None
    queue_purge_thread_interval: float | None = None
    queue_notify_thread_interval: float | None = None
    queue_purge_max_age: int = 60  # days
    queue_purge_limit: int = 1000  # rows per delete round
    queue_wait_notify_interval: float = 30.0  # seconds

    # Worker runtime (added by this library).
    queue_concurrency: int = 1
    # Connections of a worker with async handlers (None: QUEUE_CONCURRENCY): its
    # coroutines wait for one before they claim, so a pool smaller than the
    # concurrency still keeps every connection busy while handlers await I/O.
    queue_pool_size: int | None = None
    queue_grace_period: float = 30.0  # seconds in-flight tasks get at shutdown
    queue_poll_interval: float = 0.5  # seconds between polls where there is no LISTEN
    # Seconds an attempt may run before it is asked to stop and, QUEUE_TASK_TIMEOUT_GRACE
    # seconds later, given up and retried (docs/lifecycle.md); None: no timeout.
    queue_task_timeout: float | None = None
    queue_task_timeout_grace: float = 5.0
    # Group commit (docs/group-commit.md): up to this many tasks claimed at once and
    # committed together, each handler in a savepoint; 1: one commit per task. None
    # (unset): DEFAULT_BATCH_SIZE where group commit applies, one commit per task
    # elsewhere without a word (``batch_size``).
    queue_batch_size: int | None = None
    # Milliseconds a commit group stays open: past it, the group commits its finished
    # tasks after its running one; a group claims as many tasks as the recent handlers
    # run in that time (at least one).
    queue_batch_max_ms: float = 20.0
    # How the dispatcher learns of new tasks: "listen", "poll" or "server"; None:
    # the socket server in CLIENT_SERVER_MODE, else LISTEN where the database
    # has it, else polling (docs/how-to/poolers.md).
    queue_wakeup: str | None = None
    # PostgreSQL only. False: the worker's task transactions commit without
    # waiting for the WAL flush (synchronous_commit = off on its connections).
    # A database crash may then forget the last fraction of a second of
    # finished tasks, their handlers' writes with them, and those tasks run
    # again; nothing is lost from the queue and nothing is half-committed.
    queue_synchronous_commit: bool = True
    # While nsj-queue-lib 1.2.2 workers may serve the same queue (PostgreSQL,
    # CLIENT_SERVER_MODE=false): "AUTO" (on for a table 1.2.2's db_gen made),
    # "ON" or "OFF". See docs/upgrading.md.
    queue_compat_1_2_2: str = "AUTO"
    # MariaDB Galera only: the wsrep_node_name of the one node every worker writes
    # through (a single writer, the other nodes standbys). Without it a worker on
    # Galera needs CLIENT_SERVER_MODE (docs/how-to/galera.md).
    queue_galera_writer_node: str | None = None

    default_webhook_timeout: float = 20.0

    # Metrics and health endpoints (docs/metrics.md): off while the port is unset.
    queue_metrics_port: int | None = None
    queue_metrics_depth_interval: float = 15.0  # seconds between queue-depth samples

    # Logging.
    log_debug: bool = False
    log_format: str = "text"  # or "json": one JSON object per line (when the library configures)
    env: str = "DEV"
    grafana_url: str | None = None

    # Client/server mode.
    client_server_mode: bool = False
    server_host: str = "127.0.0.1"
    notify_service_port: int = 8770
    lock_service_port: int = 8970
    timeout_socket_message: float = 5.0
    max_client_threads: int = 50
    check_tasks_interval: float = 15.0
    lock_service_wait_conn_interval: float = 30.0
    queue_server_token: str | None = dataclasses.field(default=None, repr=False)
    queue_server_bind: str | None = None  # where the server listens; loopback only without a token

    def __post_init__(self) -> None:
        """Settings built in code are checked as ``from_env`` checks the environment."""
        if isinstance(self.queue_compat_1_2_2, str):  # "on" as the variable takes it
            object.__setattr__(self, "queue_compat_1_2_2", self.queue_compat_1_2_2.upper())
        problems = check_values(dataclasses.asdict(self))
        if problems:
            raise ConfigError(problems)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Build settings from an environment mapping; raise ConfigError listing every problem."""
        environ, dsn_problems = _with_dsn(environ)
        reader = _Reader(environ)
        reader.problems.update(dsn_problems)
        driver = reader.choice("DB_DRIVER", DRIVERS, "POSTGRES", aliases=_ALIASES["DB_DRIVER"])
        values: dict[str, Any] = {
            "db_driver": driver,
            **_database_values(reader, driver),
            **_queue_values(reader),
            **_services_values(reader),
            **_server_values(reader),
            **_logging_values(reader),
            **_metrics_values(reader),
        }
        # Forms were read above; ranges and names are checked once, here and for code alike.
        problems = dict(reader.problems)
        for variable, why in check_values(values).items():
            problems.setdefault(reader.used.get(variable, variable), why)
        if problems:
            raise ConfigError(problems)
        return cls(**values)

    def with_changes(self, **changes: Any) -> Settings:
        """A copy with some fields replaced (settings are frozen)."""
        return dataclasses.replace(self, **changes)

    @property
    def async_pool_size(self) -> int:
        """Connections of a worker with async handlers: QUEUE_POOL_SIZE, else QUEUE_CONCURRENCY."""
        return self.queue_pool_size or self.queue_concurrency

    @property
    def batch_size(self) -> int:
        """Tasks per commit group: QUEUE_BATCH_SIZE, else DEFAULT_BATCH_SIZE."""
        return self.queue_batch_size or DEFAULT_BATCH_SIZE

    def postgres_conninfo(self) -> str:
        """libpq connection string for these settings."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(
            host=self.db_host,
            port=port_text(self.db_port),
            dbname=self.db_name,
            user=self.db_user,
            password=self.db_pass or None,
            application_name=f"nsj_queue_lib:{self.queue_name}"[:63],
            sslmode=self.db_sslmode,
            sslrootcert=self.db_sslrootcert,
            sslcert=self.db_sslcert,
            sslkey=self.db_sslkey,
            target_session_attrs=self.db_target_session_attrs,
        )

    def hosts(self) -> list[str]:
        """The hosts of DB_HOST (PostgreSQL tries them in order)."""
        return [host.strip() for host in self.db_host.split(",")]

    def masked_dsn(self) -> str:
        """The connection as a URL with the password masked: for logs, never a secret."""
        return masked_url(
            self.db_driver,
            self.db_user,
            bool(self.db_pass),
            self.hosts(),
            self.db_port,
            self.db_name,
            {
                "sslmode": self.db_sslmode,
                "sslrootcert": self.db_sslrootcert,
                "sslcert": self.db_sslcert,
                "sslkey": self.db_sslkey,
                "target_session_attrs": self.db_target_session_attrs,
            },
        )


def _with_dsn(environ: Mapping[str, str]) -> tuple[Mapping[str, str], dict[str, str]]:
    """The environment with DATABASE_URL / DB_DSN read as the DB_* variables they stand for,
    and {variable: why} for a DSN that cannot be read or contradicts a variable set too."""
    given = {
        name: environ[name].strip() for name in DSN_VARIABLES if (environ.get(name) or "").strip()
    }
    if not given:
        return environ, {}
    if len(set(given.values())) > 1:
        return environ, {"DB_DSN": "differs from DATABASE_URL: set one of them"}
    name, dsn = next(iter(given.items()))
    try:
        variables = dsn_variables(dsn)
    except ValueError as exc:
        return environ, {name: str(exc)}
    problems = {}
    for variable, value in variables.items():
        for set_too in (variable, *_ALIASES.get(variable, ())):
            other = (environ.get(set_too) or "").strip()
            if other and _normal(variable, other) != _normal(variable, value):
                shown = "set" if variable == "DB_PASS" else repr(other)
                problems[set_too] = (
                    f"is {shown} but {name} says otherwise: give the connection in one place"
                )
    return collections.ChainMap(variables, environ), problems  # type: ignore[arg-type]


def _normal(variable: str, value: str) -> str:
    """A value as compared between a DSN and a variable (DB_DRIVER and DB_SSLMODE: any case)."""
    return value.lower() if variable in ("DB_DRIVER", "DB_SSLMODE") else value


class _Reader:
    """Reads variables from a mapping, collecting every problem instead of stopping at the first."""

    def __init__(self, environ: Mapping[str, str]):
        self._environ = environ
        self.problems: dict[str, str] = {}
        self.used: dict[str, str] = {}  # variable -> the alias that was set instead

    def _raw(self, name: str, aliases: tuple[str, ...] = ()) -> tuple[str, str | None]:
        """(the variable that was set, its stripped value); empty values count as unset."""
        for candidate in (name, *aliases):
            value = self._environ.get(candidate)
            if value is not None and value.strip() != "":
                if candidate != name:
                    self.used[name] = candidate
                return candidate, value.strip()
        return name, None

    def _fail(self, name: str, why: str) -> None:
        self.problems.setdefault(name, why)

    def required(self, name: str, aliases: tuple[str, ...] = ()) -> str | None:
        used, value = self._raw(name, aliases)
        if value is None:
            also = f" (or {', '.join(aliases)})" if aliases else ""
            self._fail(name, f"is required{also}")
        return value

    def text(self, name: str, default: str | None, aliases: tuple[str, ...] = ()) -> str | None:
        _, value = self._raw(name, aliases)
        return default if value is None else value

    def checked(
        self, name: str, check: Callable[[str, str], str], required: bool = False
    ) -> str | None:
        _, value = self._raw(name)
        if value is None:
            if required:
                self._fail(name, "is required")
            return None
        try:
            return check(value, name)
        except InvalidIdentifierError as exc:
            self._fail(name, str(exc))
            return None

    def choice(
        self, name: str, options: tuple[str, ...], default: str, aliases: tuple[str, ...] = ()
    ) -> str | None:
        used, value = self._raw(name, aliases)
        if value is None:
            return default
        if value.upper() not in options:
            self._fail(used, f"must be one of {', '.join(options)}, got {value!r}")
            return None
        return value.upper()

    def boolean(self, name: str, default: bool) -> bool:
        used, value = self._raw(name)
        if value is None:
            return default
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        self._fail(used, f"must be true or false, got {value!r}")
        return default

    def integer(self, name: str, default: int, aliases: tuple[str, ...] = ()) -> int:
        used, value = self._raw(name, aliases)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            self._fail(used, f"must be an integer, got {value!r}")
            return default

    def optional_integer(self, name: str) -> int | None:
        _, value = self._raw(name)
        return None if value is None else self.integer(name, 0)

    def ports(
        self, name: str, default: int, aliases: tuple[str, ...] = ()
    ) -> int | tuple[int, ...]:
        """One port, or a comma-separated list of them (one per host)."""
        used, value = self._raw(name, aliases)
        if value is None:
            return default
        # An empty entry is the default port, as libpq reads "host=a,b port=,5433".
        parts = [part.strip() or str(default) for part in value.split(",")]
        if not all(part.isdigit() for part in parts):
            self._fail(used, f"must be a port or comma-separated ports, got {value!r}")
            return default
        return int(parts[0]) if len(parts) == 1 else tuple(int(part) for part in parts)

    def number(self, name: str, default: float | None) -> float | None:
        used, value = self._raw(name)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            self._fail(used, f"must be a number, got {value!r}")
            return default
        return number

    def minutes(self, name: str, default: tuple[int, ...]) -> tuple[int, ...]:
        used, value = self._raw(name)
        if value is None:
            return default
        minutes: set[int] = set()
        for part in value.split(","):
            part = part.strip()
            if not part.isdigit() or not 0 <= int(part) <= 59:
                self._fail(used, f"must be a comma-separated list of minutes 0-59, got {value!r}")
                return default
            minutes.add(int(part))
        return tuple(sorted(minutes))


def _database_values(reader: _Reader, driver: str | None) -> dict[str, Any]:
    return dict(
        db_host=reader.required("DB_HOST", aliases=_ALIASES["DB_HOST"]),
        db_port=reader.ports(
            "DB_PORT", DEFAULT_PORTS.get(driver or "POSTGRES", 5432), aliases=_ALIASES["DB_PORT"]
        ),
        db_name=reader.required("DB_BASE", aliases=_ALIASES["DB_BASE"]),
        db_user=reader.required("DB_USER", aliases=_ALIASES["DB_USER"]),
        db_pass=reader.text("DB_PASS", "", aliases=_ALIASES["DB_PASS"]),
        db_sslmode=_lower(reader.text("DB_SSLMODE", None)),
        db_sslrootcert=reader.text("DB_SSLROOTCERT", None),
        db_sslcert=reader.text("DB_SSLCERT", None),
        db_sslkey=reader.text("DB_SSLKEY", None),
        db_target_session_attrs=_lower(reader.text("DB_TARGET_SESSION_ATTRS", None)),
    )


def _lower(value: str | None) -> str | None:
    """Lower-cased; an empty value is unset."""
    return value.lower() if value else None


def _queue_values(reader: _Reader) -> dict[str, Any]:
    return dict(
        queue_name=reader.checked("QUEUE_NAME", check_identifier, required=True),
        queue_table=reader.checked("QUEUE_TABLE", check_table_name, required=True),
        queue_subscriber_table=reader.checked("QUEUE_SUBSCRIBER_TABLE", check_table_name),
        queue_max_retry=reader.integer("QUEUE_MAX_RETRY", 100),
        queue_base_interval_retry=reader.number("QUEUE_BASE_INTERVAL_RETRY", 5.0),
        queue_concurrency=reader.integer("QUEUE_CONCURRENCY", 1),
        queue_pool_size=reader.optional_integer("QUEUE_POOL_SIZE"),
        queue_grace_period=reader.number("QUEUE_GRACE_PERIOD", 30.0),
        queue_poll_interval=reader.number("QUEUE_POLL_INTERVAL", 0.5),
        queue_task_timeout=reader.number("QUEUE_TASK_TIMEOUT", None),
        queue_task_timeout_grace=reader.number("QUEUE_TASK_TIMEOUT_GRACE", 5.0),
        queue_batch_size=reader.optional_integer("QUEUE_BATCH_SIZE"),
        queue_batch_max_ms=reader.number("QUEUE_BATCH_MAX_MS", 20.0),
        queue_wakeup=_lower(reader.choice("QUEUE_WAKEUP", _UPPER_WAKEUP_MODES, "")),
        queue_synchronous_commit=reader.boolean("QUEUE_SYNCHRONOUS_COMMIT", True),
        queue_compat_1_2_2=reader.choice("QUEUE_COMPAT_1_2_2", COMPAT_MODES, "AUTO"),
        queue_galera_writer_node=reader.text("QUEUE_GALERA_WRITER_NODE", None),
        default_webhook_timeout=reader.number("DEFAULT_WEBHOOK_TIMEOUT", 20.0),
    )


_UPPER_WAKEUP_MODES = tuple(mode.upper() for mode in WAKEUP_MODES)


def _services_values(reader: _Reader) -> dict[str, Any]:
    return dict(
        queue_minute_retry_thread=reader.minutes("QUEUE_MINUTE_RETRY_THREAD", EVERY_FIVE_MINUTES),
        queue_minute_purge_thread=reader.minutes("QUEUE_MINUTE_PURGE_THREAD", (0,)),
        queue_minute_notify_thread=reader.minutes("QUEUE_MINUTE_NOTIFY_THREAD", EVERY_FIVE_MINUTES),
        queue_retry_thread_interval=reader.number("QUEUE_RETRY_THREAD_INTERVAL", None),
        queue_purge_thread_interval=reader.number("QUEUE_PURGE_THREAD_INTERVAL", None),
        queue_notify_thread_interval=reader.number("QUEUE_NOTIFY_THREAD_INTERVAL", None),
        queue_purge_max_age=reader.integer("QUEUE_PURGE_MAX_AGE", 60),
        queue_purge_limit=reader.integer("QUEUE_PURGE_LIMIT", 1000),
        queue_wait_notify_interval=reader.number("QUEUE_WAIT_NOTIFY_INTERVAL", 30.0),
    )


def _server_values(reader: _Reader) -> dict[str, Any]:
    return dict(
        client_server_mode=reader.boolean("CLIENT_SERVER_MODE", False),
        server_host=reader.text("SERVER_HOST", "127.0.0.1"),
        notify_service_port=reader.integer("NOTIFY_SERVICE_PORT", 8770),
        lock_service_port=reader.integer("LOCK_SERVICE_PORT", 8970),
        timeout_socket_message=reader.number("TIMEOUT_SOCKET_MESSAGE", 5.0),
        max_client_threads=reader.integer("MAX_CLIENT_THREADS", 50),
        check_tasks_interval=reader.number("CHECK_TASKS_INTERVAL", 15.0),
        lock_service_wait_conn_interval=reader.number("LOCK_SERVICE_WAIT_CONN_INTERVAL", 30.0),
        queue_server_token=reader.text("QUEUE_SERVER_TOKEN", None),
        queue_server_bind=reader.text("QUEUE_SERVER_BIND", None),
    )


def _logging_values(reader: _Reader) -> dict[str, Any]:
    return dict(
        log_debug=reader.boolean("LOG_DEBUG", False),
        log_format=(reader.text("LOG_FORMAT", "text") or "text").lower(),
        env=(reader.text("ENV", "DEV") or "DEV").upper(),
        grafana_url=reader.text("GRAFANA_URL", None),
    )


def _metrics_values(reader: _Reader) -> dict[str, Any]:
    return dict(
        queue_metrics_port=reader.optional_integer("QUEUE_METRICS_PORT"),
        queue_metrics_depth_interval=reader.number("QUEUE_METRICS_DEPTH_INTERVAL", 15.0),
    )


# What every value must be, for settings read from the environment or built in
# code: field -> (variable, minimum, maximum, strictly positive). Integers are
# the fields whose default is an int.
_BOUNDS: dict[str, tuple[str, float | None, float | None, bool]] = {
    "queue_max_retry": ("QUEUE_MAX_RETRY", 1, None, False),
    "queue_base_interval_retry": ("QUEUE_BASE_INTERVAL_RETRY", None, None, True),
    "queue_concurrency": ("QUEUE_CONCURRENCY", 1, None, False),
    "queue_pool_size": ("QUEUE_POOL_SIZE", 1, None, False),
    "queue_grace_period": ("QUEUE_GRACE_PERIOD", 0, None, False),
    "queue_poll_interval": ("QUEUE_POLL_INTERVAL", None, None, True),
    "queue_task_timeout": ("QUEUE_TASK_TIMEOUT", None, None, True),
    "queue_task_timeout_grace": ("QUEUE_TASK_TIMEOUT_GRACE", 0, None, False),
    "queue_batch_size": ("QUEUE_BATCH_SIZE", 1, MAX_BATCH_SIZE, False),
    "queue_batch_max_ms": ("QUEUE_BATCH_MAX_MS", None, None, True),
    "default_webhook_timeout": ("DEFAULT_WEBHOOK_TIMEOUT", None, None, True),
    "queue_retry_thread_interval": ("QUEUE_RETRY_THREAD_INTERVAL", None, None, True),
    "queue_purge_thread_interval": ("QUEUE_PURGE_THREAD_INTERVAL", None, None, True),
    "queue_notify_thread_interval": ("QUEUE_NOTIFY_THREAD_INTERVAL", None, None, True),
    "queue_purge_max_age": ("QUEUE_PURGE_MAX_AGE", 0, None, False),
    "queue_purge_limit": ("QUEUE_PURGE_LIMIT", 1, None, False),
    "queue_wait_notify_interval": ("QUEUE_WAIT_NOTIFY_INTERVAL", None, None, True),
    "notify_service_port": ("NOTIFY_SERVICE_PORT", 1, 65535, False),
    "lock_service_port": ("LOCK_SERVICE_PORT", 1, 65535, False),
    "timeout_socket_message": ("TIMEOUT_SOCKET_MESSAGE", None, None, True),
    "max_client_threads": ("MAX_CLIENT_THREADS", 1, None, False),
    "check_tasks_interval": ("CHECK_TASKS_INTERVAL", None, None, True),
    "lock_service_wait_conn_interval": ("LOCK_SERVICE_WAIT_CONN_INTERVAL", None, None, True),
    "queue_metrics_port": ("QUEUE_METRICS_PORT", 1, 65535, False),
    "queue_metrics_depth_interval": ("QUEUE_METRICS_DEPTH_INTERVAL", None, None, True),
}
_INTEGERS = {f.name for f in dataclasses.fields(Settings) if isinstance(f.default, int)} | {
    "queue_metrics_port",  # optional (None: off), an integer when set
    "queue_pool_size",  # optional (None: QUEUE_CONCURRENCY)
    "queue_batch_size",  # optional (None: DEFAULT_BATCH_SIZE where group commit applies)
}
_REQUIRED = {"db_host": "DB_HOST", "db_name": "DB_BASE", "db_user": "DB_USER"}
_NAMES = {
    "queue_name": ("QUEUE_NAME", check_identifier),
    "queue_table": ("QUEUE_TABLE", check_table_name),
    "queue_subscriber_table": ("QUEUE_SUBSCRIBER_TABLE", check_table_name),
}
_MINUTES = {
    "queue_minute_retry_thread": "QUEUE_MINUTE_RETRY_THREAD",
    "queue_minute_purge_thread": "QUEUE_MINUTE_PURGE_THREAD",
    "queue_minute_notify_thread": "QUEUE_MINUTE_NOTIFY_THREAD",
}


def check_values(values: Mapping[str, Any]) -> dict[str, str]:
    """{variable: why} for every field of ``values`` outside what its variable allows.

    QUEUE_NAME and QUEUE_TABLE may be empty here (settings for a client of the
    socket server need no queue); ``from_env`` and the worker require them.
    """
    problems = _connection_problems(values)
    for field, variable in _REQUIRED.items():
        if field in values and not (isinstance(values[field], str) and values[field].strip()):
            problems[variable] = "is required"
    if "db_driver" in values and str(values["db_driver"]).upper() not in DRIVERS:
        problems["DB_DRIVER"] = f"must be one of {', '.join(DRIVERS)}, got {values['db_driver']!r}"
    compat = values.get("queue_compat_1_2_2", "AUTO")
    if compat not in COMPAT_MODES:
        problems["QUEUE_COMPAT_1_2_2"] = f"must be one of {', '.join(COMPAT_MODES)}, got {compat!r}"
    if "log_format" in values and values["log_format"] not in LOG_FORMATS:
        problems["LOG_FORMAT"] = (
            f"must be one of {', '.join(LOG_FORMATS)}, got {values['log_format']!r}"
        )
    problems.update(_wakeup_problems(values))
    for field, (variable, check) in _NAMES.items():
        if values.get(field):
            try:
                check(values[field], variable)
            except InvalidIdentifierError as exc:
                problems[variable] = str(exc)
    for field, variable in _MINUTES.items():
        minutes = values.get(field, ())
        if not all(isinstance(m, int) and 0 <= m <= 59 for m in minutes):
            problems[variable] = f"must be minutes 0-59, got {minutes!r}"
    for field, bounds in _BOUNDS.items():
        if values.get(field) is not None:
            why = _out_of_bounds(values[field], field in _INTEGERS, *bounds[1:])
            if why:
                problems[bounds[0]] = why
    problems.update(_batch_size_problems(values))
    return problems


def _batch_size_problems(values: Mapping[str, Any]) -> dict[str, str]:
    """QUEUE_BATCH_SIZE within PostgreSQL's own bound (its subtransaction cache)."""
    size = values.get("queue_batch_size")
    driver = str(values.get("db_driver", "POSTGRES")).upper()
    if driver != "POSTGRES" or not isinstance(size, int) or size <= MAX_BATCH_SIZE_POSTGRES:
        return {}
    return {  # instead of every driver's bound (200), which means nothing there
        "QUEUE_BATCH_SIZE": f"must be <= {MAX_BATCH_SIZE_POSTGRES} on PostgreSQL (a group's "
        f"savepoints are subtransactions, of which it caches 64 per transaction), got {size!r}"
    }


_CHOICES = {
    "db_sslmode": ("DB_SSLMODE", SSL_MODES),
    "db_target_session_attrs": ("DB_TARGET_SESSION_ATTRS", TARGET_SESSION_ATTRS),
}
_FILES = {
    "db_sslrootcert": "DB_SSLROOTCERT",
    "db_sslcert": "DB_SSLCERT",
    "db_sslkey": "DB_SSLKEY",
}


def _connection_problems(values: Mapping[str, Any]) -> dict[str, str]:
    """DB_PORT (one port per host), the TLS files and the choices among libpq's words."""
    problems: dict[str, str] = {}
    port = values.get("db_port")
    ports = port if isinstance(port, tuple) else (port,)
    if "db_port" in values:
        why = next(filter(None, (_out_of_bounds(p, True, 1, 65535, False) for p in ports)), None)
        hosts = str(values.get("db_host") or "").count(",") + 1
        if why:
            problems["DB_PORT"] = why
        elif len(ports) not in (1, hosts):
            problems["DB_PORT"] = f"lists {len(ports)} ports for {hosts} hosts in DB_HOST"
    for field, (variable, options) in _CHOICES.items():
        if values.get(field) is not None and values[field] not in options:
            problems[variable] = f"must be one of {', '.join(options)}, got {values[field]!r}"
    for field, variable in _FILES.items():
        if values.get(field) and not os.path.isfile(values[field]):
            problems[variable] = f"no such file: {values[field]!r}"
    if bool(values.get("db_sslcert")) != bool(values.get("db_sslkey")):
        problems.setdefault(
            "DB_SSLKEY", "DB_SSLCERT and DB_SSLKEY go together (a client certificate and its key)"
        )
    return problems


def _wakeup_problems(values: Mapping[str, Any]) -> dict[str, str]:
    """QUEUE_WAKEUP must agree with CLIENT_SERVER_MODE: the socket server's wake-ups need
    its mode, and in its mode the server listens for the workers (polling stays possible)."""
    wakeup = values.get("queue_wakeup")
    server_mode = bool(values.get("client_server_mode"))
    if wakeup is None:
        return {}
    if wakeup not in WAKEUP_MODES:
        return {"QUEUE_WAKEUP": f"must be one of {', '.join(WAKEUP_MODES)}, got {wakeup!r}"}
    if wakeup == "server" and not server_mode:
        return {"QUEUE_WAKEUP": "can be 'server' only with CLIENT_SERVER_MODE=true"}
    if wakeup == "listen" and server_mode:
        return {
            "QUEUE_WAKEUP": "cannot be 'listen' with CLIENT_SERVER_MODE=true: the socket "
            "server listens for its workers (use 'server' or 'poll')"
        }
    return {}


def _out_of_bounds(
    value: Any, integer: bool, minimum: float | None, maximum: float | None, positive: bool
) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return f"must be {'an integer' if integer else 'a number'}, got {value!r}"
    if value != value or value in (float("inf"), float("-inf")):
        return f"must be a finite number, got {value!r}"
    if positive and value <= 0:
        return f"must be > 0, got {value!r}"
    if minimum is not None and value < minimum:
        return f"must be >= {minimum:g}, got {value!r}"
    if maximum is not None and value > maximum:
        return f"must be <= {maximum:g}, got {value!r}"
    return None


def __getattr__(name: str) -> Any:
    """1.2.2's module-level names (``logger``, ``QUEUE_TABLE``, ...), computed on import of
    the name with a ``DeprecationWarning`` (legacy_settings.py)."""
    from nsj_queue_lib.legacy_settings import legacy_setting

    return legacy_setting(name)
