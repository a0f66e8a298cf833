"""Logging set-up, called by entry points only (never at import time).

The library logs under ``nsj_queue_lib.*`` and its records propagate like any
library's. ``configure_logging`` adds a stderr handler (text, or one JSON
object per line with LOG_FORMAT=json) only when the application has not
configured logging itself: when the root logger has no handler. An
application that did keeps its handlers, levels and format; LOG_DEBUG=true
then only lowers the ``nsj_queue_lib`` logger to DEBUG.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys

from nsj_queue_lib.settings import Settings

LOGGER_NAME = "nsj_queue_lib"
FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
_MARK = "_nsj_queue_lib"  # set on the handlers configure_logging added


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{name}")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, thread, message,
    and the traceback as ``exc_info`` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def make_formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else logging.Formatter(FORMAT)


def _ours(handler: logging.Handler) -> bool:
    return bool(getattr(handler, _MARK, False))


def application_configured_logging() -> bool:
    """Whether the application set up logging: a handler on the root logger, or one it
    added to the library's logger."""
    library = logging.getLogger(LOGGER_NAME)
    return bool(logging.getLogger().handlers) or any(not _ours(h) for h in library.handlers)


def configure_logging(settings: Settings) -> logging.Logger:
    """A stderr handler unless the application configured logging; Loki when GRAFANA_URL is set
    and its package is installed. Idempotent."""
    logger = logging.getLogger(LOGGER_NAME)
    configured_by_us = any(_ours(h) for h in logger.handlers)
    if not configured_by_us and application_configured_logging():
        if settings.log_debug:
            logger.setLevel(logging.DEBUG)
    else:
        logger.setLevel(logging.DEBUG if settings.log_debug else logging.INFO)
        if not configured_by_us:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(make_formatter(settings.log_format))
            setattr(handler, _MARK, True)
            logger.addHandler(handler)
    if settings.grafana_url and not any(getattr(h, "_nsj_loki", False) for h in logger.handlers):
        _add_loki_handler(logger, settings)
    return logger


def _add_loki_handler(logger: logging.Logger, settings: Settings) -> None:
    try:
        import logging_loki  # optional: pip install nsj-queue-lib[loki]
    except ImportError:
        logger.warning(
            "GRAFANA_URL is set but python-logging-loki is not installed; logging to stderr only"
        )
        return
    handler = logging_loki.LokiHandler(
        url=settings.grafana_url,
        tags={
            "application": "nsj_queue_lib",
            "env": settings.env.lower(),
            "queue": settings.queue_name,
        },
        version="1",
    )
    handler.setFormatter(make_formatter(settings.log_format))
    handler._nsj_loki = True
    logger.addHandler(handler)
