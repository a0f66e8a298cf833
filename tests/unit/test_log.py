"""configure_logging: the application's logging set-up wins; the library's own stderr
handler (text or JSON) only when there is none; psycopg_pool's lines about the worker's
pool are left to the worker."""

from __future__ import annotations

import io
import json
import logging

import pytest

from nsj_queue_lib.log import configure_logging
from nsj_queue_lib.settings import Settings

SETTINGS = Settings(db_host="h", db_name="d", db_user="u", queue_name="q", queue_table="q")


@pytest.fixture
def library_logger():
    """The ``nsj_queue_lib`` logger, put back as it was after the test."""
    logger = logging.getLogger("nsj_queue_lib")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield logger
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


def bare_root(monkeypatch) -> None:
    """From here on, a root logger without handlers: an application that configured no
    logging (called in the test: pytest adds its handlers after the fixtures ran)."""
    monkeypatch.setattr(logging.getLogger(), "handlers", [])


def test_an_application_that_configured_logging_keeps_it(library_logger, caplog):
    """caplog's handler on the root logger is such a configuration: the library's records
    reach it, and nothing of the library's is added."""
    configure_logging(SETTINGS)
    assert library_logger.handlers == []
    assert library_logger.propagate is True
    caplog.set_level(logging.INFO, logger="nsj_queue_lib")
    logging.getLogger("nsj_queue_lib.executor").warning("seen by the application")
    assert [r.getMessage() for r in caplog.records] == ["seen by the application"]


def test_log_debug_lowers_only_the_librarys_level(library_logger):
    configure_logging(SETTINGS.with_changes(log_debug=True))
    assert library_logger.level == logging.DEBUG
    assert library_logger.handlers == []
    assert logging.getLogger().level != logging.DEBUG or logging.getLogger().handlers


def test_without_a_configuration_the_library_logs_to_stderr_once(library_logger, monkeypatch):
    bare_root(monkeypatch)
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    configure_logging(SETTINGS)
    configure_logging(SETTINGS)  # a second worker in the process adds no second handler
    assert len(library_logger.handlers) == 1
    assert library_logger.propagate is True
    logging.getLogger("nsj_queue_lib.runtime").info("worker starting")
    logging.getLogger("nsj_queue_lib.runtime").debug("not shown")
    lines = stderr.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith("INFO nsj_queue_lib.runtime worker starting")


def test_json_format(library_logger, monkeypatch):
    bare_root(monkeypatch)
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    configure_logging(SETTINGS.with_changes(log_format="json"))
    logger = logging.getLogger("nsj_queue_lib.executor")
    try:
        raise ValueError("boom")
    except ValueError as exc:
        error = exc
    logger.warning("task=%s failed", 7, exc_info=error)
    [line] = stderr.getvalue().splitlines()
    entry = json.loads(line)
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "nsj_queue_lib.executor"
    assert entry["message"] == "task=7 failed"
    assert entry["time"].endswith("Z")
    assert "raise ValueError" in entry["exc_info"] and "ValueError: boom" in entry["exc_info"]


def test_psycopg_pool_lines_about_the_workers_pool_are_silenced(caplog):
    from nsj_queue_lib.db.driver import make_driver

    make_driver(SETTINGS).make_pool(1)  # never opened: no connection is made
    caplog.set_level(logging.INFO, logger="psycopg.pool")
    pool_logger = logging.getLogger("psycopg.pool")
    pool_logger.warning("error connecting in %r: %s", "nsj_queue_lib:q", "connection refused")
    pool_logger.warning("error connecting in %r: %s", "the_apps_pool", "connection refused")
    assert [r.getMessage() for r in caplog.records] == [
        "error connecting in 'the_apps_pool': connection refused"
    ]
