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

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from nsj_queue_lib.exceptions import ConfigError, InvalidIdentifierError
from nsj_queue_lib.identifiers import check_identifier, check_table_name

DRIVERS = ("POSTGRES", "MYSQL", "SINGLE_STORE")
DEFAULT_PORTS = {"POSTGRES": 5432, "MYSQL": 3306, "SINGLE_STORE": 3306}
EVERY_FIVE_MINUTES = tuple(range(0, 60, 5))

_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a worker or the socket server needs, with the original defaults."""

    # Database connection (DB_* or DATABASE_* variables).
    db_host: str
    db_name: str
    db_user: str
    db_pass: str = ""
    db_port: int = 5432
    db_driver: str = "POSTGRES"

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
    queue_grace_period: float = 30.0  # seconds in-flight tasks get at shutdown
    queue_poll_interval: float = 0.5  # seconds between polls where there is no LISTEN
    # PostgreSQL only. False: the worker's task transactions commit without
    # waiting for the WAL flush (synchronous_commit = off on its connections).
    # A database crash may then forget the last fraction of a second of
    # finished tasks, their handlers' writes with them, and those tasks run
    # again; nothing is lost from the queue and nothing is half-committed.
    queue_synchronous_commit: bool = True

    default_webhook_timeout: float = 20.0

    # Logging.
    log_debug: bool = False
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

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Build settings from an environment mapping; raise ConfigError listing every problem."""
        reader = _Reader(environ)
        driver = reader.choice("DB_DRIVER", DRIVERS, "POSTGRES", aliases=("DATABASE_DRIVER",))
        values: dict[str, Any] = {
            "db_driver": driver,
            **_database_values(reader, driver),
            **_queue_values(reader),
            **_services_values(reader),
            **_server_values(reader),
            **_logging_values(reader),
        }
        if reader.problems:
            raise ConfigError(reader.problems)
        return cls(**values)

    def with_changes(self, **changes: Any) -> Settings:
        """A copy with some fields replaced (settings are frozen)."""
        return dataclasses.replace(self, **changes)

    def postgres_conninfo(self) -> str:
        """libpq connection string for these settings."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(
            host=self.db_host,
            port=self.db_port,
            dbname=self.db_name,
            user=self.db_user,
            password=self.db_pass or None,
            application_name=f"nsj_queue_lib:{self.queue_name}"[:63],
        )


class _Reader:
    """Reads variables from a mapping, collecting every problem instead of stopping at the first."""

    def __init__(self, environ: Mapping[str, str]):
        self._environ = environ
        self.problems: dict[str, str] = {}

    def _raw(self, name: str, aliases: tuple[str, ...] = ()) -> tuple[str, str | None]:
        """(the variable that was set, its stripped value); empty values count as unset."""
        for candidate in (name, *aliases):
            value = self._environ.get(candidate)
            if value is not None and value.strip() != "":
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

    def integer(
        self,
        name: str,
        default: int,
        minimum: int | None = None,
        maximum: int | None = None,
        aliases: tuple[str, ...] = (),
    ) -> int:
        used, value = self._raw(name, aliases)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            self._fail(used, f"must be an integer, got {value!r}")
            return default
        if minimum is not None and number < minimum:
            self._fail(used, f"must be >= {minimum}, got {number}")
        elif maximum is not None and number > maximum:
            self._fail(used, f"must be <= {maximum}, got {number}")
        return number

    def number(
        self,
        name: str,
        default: float | None,
        minimum: float | None = None,
        positive: bool = False,
    ) -> float | None:
        used, value = self._raw(name)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            self._fail(used, f"must be a number, got {value!r}")
            return default
        if number != number or number in (float("inf"), float("-inf")):
            self._fail(used, f"must be a finite number, got {value!r}")
        elif positive and number <= 0:
            self._fail(used, f"must be > 0, got {value!r}")
        elif minimum is not None and number < minimum:
            self._fail(used, f"must be >= {minimum:g}, got {value!r}")
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
        db_host=reader.required("DB_HOST", aliases=("DATABASE_HOST",)),
        db_port=reader.integer(
            "DB_PORT",
            DEFAULT_PORTS.get(driver or "POSTGRES", 5432),
            minimum=1,
            maximum=65535,
            aliases=("DATABASE_PORT",),
        ),
        db_name=reader.required("DB_BASE", aliases=("DATABASE_NAME",)),
        db_user=reader.required("DB_USER", aliases=("DATABASE_USER",)),
        db_pass=reader.text("DB_PASS", "", aliases=("DATABASE_PASS",)),
    )


def _queue_values(reader: _Reader) -> dict[str, Any]:
    return dict(
        queue_name=reader.checked("QUEUE_NAME", check_identifier, required=True),
        queue_table=reader.checked("QUEUE_TABLE", check_table_name, required=True),
        queue_subscriber_table=reader.checked("QUEUE_SUBSCRIBER_TABLE", check_table_name),
        queue_max_retry=reader.integer("QUEUE_MAX_RETRY", 100, minimum=1),
        queue_base_interval_retry=reader.number("QUEUE_BASE_INTERVAL_RETRY", 5.0, positive=True),
        queue_concurrency=reader.integer("QUEUE_CONCURRENCY", 1, minimum=1),
        queue_grace_period=reader.number("QUEUE_GRACE_PERIOD", 30.0, minimum=0.0),
        queue_poll_interval=reader.number("QUEUE_POLL_INTERVAL", 0.5, positive=True),
        queue_synchronous_commit=reader.boolean("QUEUE_SYNCHRONOUS_COMMIT", True),
        default_webhook_timeout=reader.number("DEFAULT_WEBHOOK_TIMEOUT", 20.0, positive=True),
    )


def _services_values(reader: _Reader) -> dict[str, Any]:
    return dict(
        queue_minute_retry_thread=reader.minutes("QUEUE_MINUTE_RETRY_THREAD", EVERY_FIVE_MINUTES),
        queue_minute_purge_thread=reader.minutes("QUEUE_MINUTE_PURGE_THREAD", (0,)),
        queue_minute_notify_thread=reader.minutes("QUEUE_MINUTE_NOTIFY_THREAD", EVERY_FIVE_MINUTES),
        queue_retry_thread_interval=reader.number(
            "QUEUE_RETRY_THREAD_INTERVAL", None, positive=True
        ),
        queue_purge_thread_interval=reader.number(
            "QUEUE_PURGE_THREAD_INTERVAL", None, positive=True
        ),
        queue_notify_thread_interval=reader.number(
            "QUEUE_NOTIFY_THREAD_INTERVAL", None, positive=True
        ),
        queue_purge_max_age=reader.integer("QUEUE_PURGE_MAX_AGE", 60, minimum=0),
        queue_purge_limit=reader.integer("QUEUE_PURGE_LIMIT", 1000, minimum=1),
        queue_wait_notify_interval=reader.number("QUEUE_WAIT_NOTIFY_INTERVAL", 30.0, positive=True),
    )


def _server_values(reader: _Reader) -> dict[str, Any]:
    return dict(
        client_server_mode=reader.boolean("CLIENT_SERVER_MODE", False),
        server_host=reader.text("SERVER_HOST", "127.0.0.1"),
        notify_service_port=reader.integer("NOTIFY_SERVICE_PORT", 8770, minimum=1, maximum=65535),
        lock_service_port=reader.integer("LOCK_SERVICE_PORT", 8970, minimum=1, maximum=65535),
        timeout_socket_message=reader.number("TIMEOUT_SOCKET_MESSAGE", 5.0, positive=True),
        max_client_threads=reader.integer("MAX_CLIENT_THREADS", 50, minimum=1),
        check_tasks_interval=reader.number("CHECK_TASKS_INTERVAL", 15.0, positive=True),
        lock_service_wait_conn_interval=reader.number(
            "LOCK_SERVICE_WAIT_CONN_INTERVAL", 30.0, positive=True
        ),
        queue_server_token=reader.text("QUEUE_SERVER_TOKEN", None),
        queue_server_bind=reader.text("QUEUE_SERVER_BIND", None),
    )


def _logging_values(reader: _Reader) -> dict[str, Any]:
    return dict(
        log_debug=reader.boolean("LOG_DEBUG", False),
        env=(reader.text("ENV", "DEV") or "DEV").upper(),
        grafana_url=reader.text("GRAFANA_URL", None),
    )
