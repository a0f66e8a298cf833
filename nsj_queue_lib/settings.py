"""Settings: one frozen object built from the environment at start-up.

Nothing here runs at import time. ``Settings.from_env(os.environ)`` reads
every variable of the contract, checks each one's form, and raises a single
``ConfigError`` naming every bad variable at once. What a database cannot
honour (QUEUE_SYNCHRONOUS_COMMIT=false on MySQL, SingleStore without
CLIENT_SERVER_MODE) is its driver's to say (``Driver.check_settings``), when a
worker starts. Workers and the server build settings when they start; code
can build a ``Settings`` directly instead.

The environment is read by ``settings_env`` (which variable is which field)
with ``settings_reader`` (each variable's form); what each value may be is
``settings_checks``'. Their constants are importable from here as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nsj_queue_lib.db.dsn import masked_url
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.settings_checks import COMPAT_MODES as COMPAT_MODES
from nsj_queue_lib.settings_checks import LOG_FORMATS as LOG_FORMATS
from nsj_queue_lib.settings_checks import MAX_BATCH_SIZE as MAX_BATCH_SIZE
from nsj_queue_lib.settings_checks import SSL_MODES as SSL_MODES
from nsj_queue_lib.settings_checks import TARGET_SESSION_ATTRS as TARGET_SESSION_ATTRS
from nsj_queue_lib.settings_checks import WAKEUP_MODES as WAKEUP_MODES
from nsj_queue_lib.settings_checks import check_values
from nsj_queue_lib.settings_env import DSN_VARIABLES as DSN_VARIABLES
from nsj_queue_lib.settings_env import EVERY_FIVE_MINUTES as EVERY_FIVE_MINUTES
from nsj_queue_lib.settings_env import read_environment

# QUEUE_BATCH_SIZE when unset, where group commit applies (docs/group-commit.md).
DEFAULT_BATCH_SIZE = 20


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
    # The vacuum service (runtime/vacuum.py): seconds between its looks at the queue table,
    # and the dead rows that make it vacuum (0: never).
    queue_vacuum_interval: float = 60.0
    queue_vacuum_dead_rows: int = 10_000
    # The tally service (runtime/tally.py): seconds between its folds of the finished
    # attempts into the counts nsjq status reads (0: none).
    queue_tally_interval: float = 60.0

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
    # One write per task (PostgreSQL, group commit; docs/internals/one-write.md): a
    # group's claim locks its rows instead of writing them 'processando', and the
    # group's commit writes each task's outcome, its only write.
    queue_one_write: bool = False
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

    # OpenTelemetry tracing (docs/integrations/opentelemetry.md): a span per attempt.
    # None (QUEUE_OTEL unset): on where opentelemetry-api is installed; True: on, and a
    # worker without it stops at start; False: off.
    queue_otel: bool | None = None
    queue_otel_claim_spans: bool = False  # a span per claim and per group commit too
    queue_otel_link_only: bool = False  # each attempt a new trace, linked to the enqueue's

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
        problems = check_values(dataclasses.asdict(self), _INTEGERS)
        if problems:
            raise ConfigError(problems)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Build settings from an environment mapping; raise ConfigError listing every problem."""
        values, reader = read_environment(environ)
        # Forms were read above; ranges and names are checked once, here and for code alike.
        problems = dict(reader.problems)
        for variable, why in check_values(values, _INTEGERS).items():
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


_INTEGERS = {f.name for f in dataclasses.fields(Settings) if isinstance(f.default, int)} | {
    "queue_metrics_port",  # optional (None: off), an integer when set
    "queue_pool_size",  # optional (None: QUEUE_CONCURRENCY)
    "queue_batch_size",  # optional (None: DEFAULT_BATCH_SIZE where group commit applies)
}


def __getattr__(name: str) -> Any:
    """1.2.2's module-level names (``logger``, ``QUEUE_TABLE``, ...), computed on import of
    the name with a ``DeprecationWarning`` (legacy_settings.py)."""
    from nsj_queue_lib.legacy_settings import legacy_setting

    return legacy_setting(name)
