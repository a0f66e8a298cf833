"""What every setting may be: the allowed words, the bounds, and ``check_values``.

The same checks apply to settings read from the environment and to settings
built in code (``Settings.__post_init__``). Each problem is reported under the
environment variable of its field, ``{variable: why}``.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Any

from nsj_queue_lib.db.driver import DRIVER_KEYS, driver_capabilities
from nsj_queue_lib.exceptions import InvalidIdentifierError
from nsj_queue_lib.identifiers import check_identifier, check_table_name

LOG_FORMATS = ("text", "json")
# QUEUE_COMPAT_1_2_2: hold nsj-queue-lib 1.2.2's task keys too (docs/upgrading.md).
COMPAT_MODES = ("AUTO", "ON", "OFF")
# libpq's sslmode values, from no TLS to a verified certificate naming the host.
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
# libpq's target_session_attrs values (PostgreSQL only).
TARGET_SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")
WAKEUP_MODES = ("listen", "poll", "server")
# The largest commit group. On PostgreSQL a group's savepoints are
# subtransactions, of which it caches 64 per transaction; past that every
# snapshot of every session gets slower. InnoDB has no such cache, and
# MySQL/MariaDB, which pay more per statement than per row, drain faster with
# larger groups (docs/group-commit.md).
MAX_BATCH_SIZE = 200

# What every value must be, for settings read from the environment or built in
# code: field -> (variable, minimum, maximum, strictly positive). Which of them
# are integers, check_values is told (Settings: the fields whose default is an int).
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
    "queue_vacuum_interval": ("QUEUE_VACUUM_INTERVAL", None, None, True),
    "queue_vacuum_dead_rows": ("QUEUE_VACUUM_DEAD_ROWS", 0, None, False),
    "queue_tally_interval": ("QUEUE_TALLY_INTERVAL", 0, None, False),
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


def check_values(values: Mapping[str, Any], integer_fields: Collection[str]) -> dict[str, str]:
    """{variable: why} for every field of ``values`` outside what its variable allows;
    ``integer_fields``: the fields that must be integers, not any number.

    QUEUE_NAME and QUEUE_TABLE may be empty here (settings for a client of the
    socket server need no queue); ``from_env`` and the worker require them.
    """
    problems = _connection_problems(values)
    for field, variable in _REQUIRED.items():
        if field in values and not (isinstance(values[field], str) and values[field].strip()):
            problems[variable] = "is required"
    if "db_driver" in values and str(values["db_driver"]).upper() not in DRIVER_KEYS:
        problems["DB_DRIVER"] = (
            f"must be one of {', '.join(DRIVER_KEYS)}, got {values['db_driver']!r}"
        )
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
            why = out_of_bounds(values[field], field in integer_fields, *bounds[1:])
            if why:
                problems[bounds[0]] = why
    problems.update(_batch_size_problems(values))
    problems.update(_one_write_problems(values))
    return problems


def _one_write_problems(values: Mapping[str, Any]) -> dict[str, str]:
    """QUEUE_ONE_WRITE where what it leaves out is not needed (docs/internals/one-write.md):
    its claims hold row locks in the database, and a timeout ends a group's session."""
    if not values.get("queue_one_write"):
        return {}
    driver = str(values.get("db_driver", "POSTGRES")).upper()
    if driver not in DRIVER_KEYS:
        return {}  # an unknown DB_DRIVER is a problem of its own
    why = None
    if not driver_capabilities(driver).held_groups:
        why = f"is PostgreSQL only, not DB_DRIVER={driver}"
    elif values.get("client_server_mode"):
        why = "cannot be used with CLIENT_SERVER_MODE (the liveness locks are the server's)"
    elif values.get("queue_task_timeout") is not None:
        why = "cannot be used with QUEUE_TASK_TIMEOUT (a timeout ends the group's session)"
    elif values.get("queue_compat_1_2_2") == "ON":
        why = "cannot be used with QUEUE_COMPAT_1_2_2=on (1.2.2's workers read 'processando')"
    return {} if why is None else {"QUEUE_ONE_WRITE": why}


def _batch_size_problems(values: Mapping[str, Any]) -> dict[str, str]:
    """QUEUE_BATCH_SIZE within the database's own bound, where it has one."""
    size = values.get("queue_batch_size")
    driver = str(values.get("db_driver", "POSTGRES")).upper()
    if driver not in DRIVER_KEYS or not isinstance(size, int):
        return {}  # an unknown DB_DRIVER is a problem of its own
    bound = driver_capabilities(driver).max_batch_size
    if bound is None or size <= bound:
        return {}
    # PostgreSQL is the database with a bound of its own (its subtransaction cache).
    return {  # instead of every driver's bound (200), which means nothing there
        "QUEUE_BATCH_SIZE": f"must be <= {bound} on PostgreSQL (a group's "
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
        why = next(filter(None, (out_of_bounds(p, True, 1, 65535, False) for p in ports)), None)
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


def out_of_bounds(
    value: Any, integer: bool, minimum: float | None, maximum: float | None, positive: bool
) -> str | None:
    """Why ``value`` is not a number (``integer``: an integer) within the bounds, or None."""
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
