"""The module-level names of nsj-queue-lib 1.2.2's ``settings`` module, read on first use.

1.2.2's ``settings`` read the environment (and failed) at import time, and its
users imported ``logger`` and the variables from it:
``from nsj_queue_lib.settings import logger, QUEUE_TABLE``. Those imports keep
working through ``nsj_queue_lib.settings.__getattr__``: each name is computed
when it is imported (never when ``settings`` is), with 1.2.2's defaults and
types, and a ``DeprecationWarning`` names what replaces it. An unset variable
without a default is ``None`` instead of an import error.
"""

from __future__ import annotations

import logging
import os
import uuid
import warnings
from collections.abc import Callable
from typing import Any

# name -> (variables read, first set wins; default; conversion)
_VARIABLES: dict[str, tuple[tuple[str, ...], str | None, Callable[[str], Any]]] = {
    "DB_HOST": (("DB_HOST", "DATABASE_HOST"), None, str),
    "DB_PORT": (("DB_PORT", "DATABASE_PORT"), None, int),
    "DB_BASE": (("DB_BASE", "DATABASE_NAME"), None, str),
    "DB_USER": (("DB_USER", "DATABASE_USER"), None, str),
    "DB_PASS": (("DB_PASS", "DATABASE_PASS"), None, str),
    "DB_DRIVER": (("DB_DRIVER", "DATABASE_DRIVER"), None, str),
    "QUEUE_NAME": (("QUEUE_NAME",), None, str),
    "QUEUE_TABLE": (("QUEUE_TABLE",), None, str),
    "QUEUE_SUBSCRIBER_TABLE": (("QUEUE_SUBSCRIBER_TABLE",), None, str),
    "QUEUE_MAX_RETRY": (("QUEUE_MAX_RETRY",), "100", int),
    "QUEUE_BASE_INTERVAL_RETRY": (("QUEUE_BASE_INTERVAL_RETRY",), "5", float),
    "QUEUE_MINUTE_RETRY_THREAD": (
        ("QUEUE_MINUTE_RETRY_THREAD",),
        "0,5,10,15,20,25,30,35,40,45,50,55",
        str,
    ),
    "QUEUE_MINUTE_PURGE_THREAD": (("QUEUE_MINUTE_PURGE_THREAD",), "0", str),
    "QUEUE_MINUTE_NOTIFY_THREAD": (
        ("QUEUE_MINUTE_NOTIFY_THREAD",),
        "0,5,10,15,20,25,30,35,40,45,50,55",
        str,
    ),
    "QUEUE_PURGE_MAX_AGE": (("QUEUE_PURGE_MAX_AGE",), "60", int),
    "QUEUE_PURGE_LIMIT": (("QUEUE_PURGE_LIMIT",), "1000", int),
    "QUEUE_WAIT_NOTIFY_INTERVAL": (("QUEUE_WAIT_NOTIFY_INTERVAL",), "30", float),
    "DEFAULT_WEBHOOK_TIMEOUT": (("DEFAULT_WEBHOOK_TIMEOUT",), "20", float),
    "ENV": (("ENV",), "DEV", str.upper),
    "GRAFANA_URL": (("GRAFANA_URL",), None, str),
    "LOG_DEBUG": (("LOG_DEBUG",), "False", lambda v: v.upper() == "TRUE"),
    "CLIENT_SERVER_MODE": (("CLIENT_SERVER_MODE",), "False", lambda v: v.upper() == "TRUE"),
    "SERVER_HOST": (("SERVER_HOST",), "127.0.0.1", str),
    "NOTIFY_SERVICE_PORT": (("NOTIFY_SERVICE_PORT",), "8770", int),
    "LOCK_SERVICE_PORT": (("LOCK_SERVICE_PORT",), "8970", int),
    "TIMEOUT_SOCKET_MESSAGE": (("TIMEOUT_SOCKET_MESSAGE",), "5", float),
}
_CONSTANTS: dict[str, Any] = {
    "GLOBAL_RUN": True,
    "END_MARK": "###END###",
    "SOCKET_BUFFER_SIZE": 1024,
}
NAMES = frozenset({*_VARIABLES, *_CONSTANTS, "logger", "WORKER_NAME"})
LOGGER_NAME = "nsj_queue_lib.app"
_WORKER_SUFFIX = str(uuid.uuid4())


def _variable(name: str) -> Any:
    variables, default, convert = _VARIABLES[name]
    raw = next((os.environ[v] for v in variables if os.environ.get(v)), default)
    return None if raw is None else convert(raw)


def legacy_setting(name: str) -> Any:
    """The value 1.2.2's ``settings.<name>`` had; ``AttributeError`` for any other name."""
    if name not in NAMES:
        raise AttributeError(f"module 'nsj_queue_lib.settings' has no attribute {name!r}")
    if name == "logger":
        replacement = (
            "logging.getLogger(...) in your own module (the worker configures logging at start)"
        )
    else:
        replacement = "the worker's Settings (nsj_queue_lib.settings.Settings.from_env(os.environ))"
    warnings.warn(
        f"nsj_queue_lib.settings.{name} is kept for nsj-queue-lib 1.2.2 code; use {replacement}",
        DeprecationWarning,
        stacklevel=3,
    )
    if name == "logger":
        return logging.getLogger(LOGGER_NAME)
    if name == "WORKER_NAME":
        return f"{_variable('QUEUE_NAME')}_WORKER_{_WORKER_SUFFIX}"
    if name in _CONSTANTS:
        return _CONSTANTS[name]
    return _variable(name)
