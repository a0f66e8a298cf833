"""Fixtures of the acceptance tests: real worker processes on a fresh queue.

- ``side``: the queue's ``<queue>_exec`` / ``<queue>_started`` tables the test
  worker (``workers/recording_worker.py``) writes.
- ``workers``: starts worker processes; every one still running is killed at
  the end of the test, and their logs are printed when the test failed.
- ``env``: ``env(**overrides)``, the environment of a worker on the test queue.
"""

from __future__ import annotations

import pytest

from tests.helpers.processes import Workers, create_side_tables, drop_side_tables, worker_env


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def side(pg_queue, pg_admin):
    create_side_tables(pg_admin, pg_queue.table)
    yield pg_queue
    drop_side_tables(pg_admin, pg_queue.table)


@pytest.fixture
def workers(request, pg_queue):
    started = Workers()
    yield started
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed and started.started:
        print(started.logs())
    started.close()


@pytest.fixture
def env(pg_dsn, pg_queue):
    def make(**overrides):
        return worker_env(pg_dsn, pg_queue.table, **overrides)

    return make
