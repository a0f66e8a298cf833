"""Which environment variable is which setting: ``read_environment`` for ``Settings.from_env``.

DATABASE_URL / DB_DSN stand for the DB_* variables they spell out; the older
DATABASE_* names are read too. The values come back with the reader, whose
``problems`` hold what could not be read and whose ``used`` names the alias
that was set in place of a variable.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

from nsj_queue_lib.db.driver import DRIVER_KEYS, driver_capabilities
from nsj_queue_lib.db.dsn import dsn_variables
from nsj_queue_lib.identifiers import check_identifier, check_table_name
from nsj_queue_lib.settings_checks import COMPAT_MODES, WAKEUP_MODES
from nsj_queue_lib.settings_reader import EnvReader

EVERY_FIVE_MINUTES = tuple(range(0, 60, 5))
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


def read_environment(environ: Mapping[str, str]) -> tuple[dict[str, Any], EnvReader]:
    """The values of Settings' fields read from ``environ``, and the reader: its
    ``problems`` are the variables it could not read, its ``used`` the aliases set."""
    environ, dsn_problems = _with_dsn(environ)
    reader = EnvReader(environ)
    reader.problems.update(dsn_problems)
    driver = reader.choice("DB_DRIVER", DRIVER_KEYS, "POSTGRES", aliases=_ALIASES["DB_DRIVER"])
    values: dict[str, Any] = {
        "db_driver": driver,
        **_database_values(reader, driver),
        **_queue_values(reader),
        **_services_values(reader),
        **_server_values(reader),
        **_logging_values(reader),
        **_metrics_values(reader),
    }
    return values, reader


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


def _database_values(reader: EnvReader, driver: str | None) -> dict[str, Any]:
    return dict(
        db_host=reader.required("DB_HOST", aliases=_ALIASES["DB_HOST"]),
        db_port=reader.ports(
            "DB_PORT",
            driver_capabilities(driver or "POSTGRES").default_port,
            aliases=_ALIASES["DB_PORT"],
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


def _queue_values(reader: EnvReader) -> dict[str, Any]:
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
        queue_one_write=reader.boolean("QUEUE_ONE_WRITE", False),
        queue_compat_1_2_2=reader.choice("QUEUE_COMPAT_1_2_2", COMPAT_MODES, "AUTO"),
        queue_galera_writer_node=reader.text("QUEUE_GALERA_WRITER_NODE", None),
        default_webhook_timeout=reader.number("DEFAULT_WEBHOOK_TIMEOUT", 20.0),
    )


_UPPER_WAKEUP_MODES = tuple(mode.upper() for mode in WAKEUP_MODES)


def _services_values(reader: EnvReader) -> dict[str, Any]:
    return dict(
        queue_minute_retry_thread=reader.minutes("QUEUE_MINUTE_RETRY_THREAD", EVERY_FIVE_MINUTES),
        queue_minute_purge_thread=reader.minutes("QUEUE_MINUTE_PURGE_THREAD", (0,)),
        queue_minute_notify_thread=reader.minutes("QUEUE_MINUTE_NOTIFY_THREAD", EVERY_FIVE_MINUTES),
        queue_retry_thread_interval=reader.number("QUEUE_RETRY_THREAD_INTERVAL", None),
        queue_purge_thread_interval=reader.number("QUEUE_PURGE_THREAD_INTERVAL", None),
        queue_notify_thread_interval=reader.number("QUEUE_NOTIFY_THREAD_INTERVAL", None),
        queue_purge_max_age=reader.integer("QUEUE_PURGE_MAX_AGE", 60),
        queue_purge_limit=reader.integer("QUEUE_PURGE_LIMIT", 1000),
        queue_vacuum_interval=reader.number("QUEUE_VACUUM_INTERVAL", 60.0),
        queue_vacuum_dead_rows=reader.integer("QUEUE_VACUUM_DEAD_ROWS", 10_000),
        queue_tally_interval=reader.number("QUEUE_TALLY_INTERVAL", 60.0),
        queue_wait_notify_interval=reader.number("QUEUE_WAIT_NOTIFY_INTERVAL", 30.0),
    )


def _server_values(reader: EnvReader) -> dict[str, Any]:
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


def _logging_values(reader: EnvReader) -> dict[str, Any]:
    return dict(
        log_debug=reader.boolean("LOG_DEBUG", False),
        log_format=(reader.text("LOG_FORMAT", "text") or "text").lower(),
        env=(reader.text("ENV", "DEV") or "DEV").upper(),
        grafana_url=reader.text("GRAFANA_URL", None),
    )


def _metrics_values(reader: EnvReader) -> dict[str, Any]:
    return dict(
        queue_metrics_port=reader.optional_integer("QUEUE_METRICS_PORT"),
        queue_metrics_depth_interval=reader.number("QUEUE_METRICS_DEPTH_INTERVAL", 15.0),
        queue_otel=reader.optional_boolean("QUEUE_OTEL"),
        queue_otel_claim_spans=reader.boolean("QUEUE_OTEL_CLAIM_SPANS", False),
        queue_otel_link_only=reader.boolean("QUEUE_OTEL_LINK_ONLY", False),
    )
