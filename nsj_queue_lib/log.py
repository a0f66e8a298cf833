"""Logging set-up, called by entry points only (never at import time)."""

from __future__ import annotations

import logging
import sys

from nsj_queue_lib.settings import Settings

LOGGER_NAME = "nsj_queue_lib"
FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{name}")


def configure_logging(settings: Settings) -> logging.Logger:
    """Console handler (stderr), plus Loki when GRAFANA_URL is set and its package is installed."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.DEBUG if settings.log_debug else logging.INFO)
    if not any(getattr(h, "_nsj_queue_lib", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        handler._nsj_queue_lib = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False
        if settings.grafana_url:
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
    handler.setFormatter(logging.Formatter(FORMAT))
    logger.addHandler(handler)
