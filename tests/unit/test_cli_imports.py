"""What ``nsjq status`` loads: the command's path imports no worker-side module.

A new ``nsjq`` process spends most of its time importing (psycopg, then this library):
``nsjq status`` once loaded 104 of the library's modules, the workers' task sessions,
stores, client and limited claim among them, 73 ms of imports (58 modules now). These
checks keep the worker's code off the command's path; the drivers still reach it when a
worker asks for it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nsj_queue_lib.db.driver import driver_class
from nsj_queue_lib.db.mysql.session import MysqlTaskSession
from nsj_queue_lib.db.postgres.session import PostgresTaskSession
from nsj_queue_lib.db.task_session import TaskSession


# What nsjq status imports before it connects: the command, the driver, the stores it reads.
def _status_path(dialect: str) -> tuple[str, ...]:
    return (
        "nsj_queue_lib.cli.app",
        "nsj_queue_lib.cli.inspect_commands",
        f"nsj_queue_lib.db.{dialect}.driver",
        f"nsj_queue_lib.db.{dialect}.inspection",
    )


_WORKER_SIDE = {
    "postgres": (
        "nsj_queue_lib.db.task_session",
        "nsj_queue_lib.db.postgres.session",
        "nsj_queue_lib.db.postgres.store",
        "nsj_queue_lib.db.postgres.client_store",
        "nsj_queue_lib.queue_client",
        "nsj_queue_lib.runtime.worker_runtime",
        # The limits' claim routine: the pause and breaker reads need the dialect's name only.
        "nsj_queue_lib.db.postgres.limits",
        "nsj_queue_lib.db.limited_routine",
    ),
    "mysql": (
        "nsj_queue_lib.db.task_session",
        "nsj_queue_lib.db.mysql.session",
        "nsj_queue_lib.db.mysql.store",
        "nsj_queue_lib.queue_client",
        "nsj_queue_lib.runtime.worker_runtime",
    ),
}


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_the_status_commands_path_loads_no_worker_module(dialect):
    path = _status_path(dialect)
    code = (
        "import importlib, json, sys\n"
        f"for name in {path!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('nsj_queue_lib'))))\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(json.loads(found.stdout))
    assert set(path) <= loaded
    worker_side = set(_WORKER_SIDE[dialect])
    assert not loaded & worker_side, sorted(loaded & worker_side)


@pytest.mark.parametrize(
    ("dialect", "session"),
    [("postgres", PostgresTaskSession), ("mysql", MysqlTaskSession), ("singlestore", TaskSession)],
)
def test_each_driver_names_its_dialects_task_session(dialect, session):
    found = driver_class(dialect).task_session_class()
    assert found is session and issubclass(found, TaskSession)
