"""Fixtures of the acceptance tests: real worker processes on a fresh queue.

- ``side``: the queue's ``<queue>_exec`` / ``<queue>_started`` tables the test
  worker (``workers/recording_worker.py``) writes.
- ``workers``: starts worker processes; every one still running is killed at
  the end of the test, and their logs are printed when the test failed.
- ``env``: ``env(**overrides)``, the environment of a worker on the test queue.
- ``long_task``: ``long_task(worker_env, key, sleep, name)`` enqueues task ``key``,
  whose first attempt sleeps ``sleep`` s, and starts worker process ``name`` on it.
"""

from __future__ import annotations

import pytest

from tests.helpers.processes import (
    create_side_tables,
    drop_side_tables,
    enqueue,
    wait_for,
    worker_env,
    workers_of,
)
from tests.helpers.recorder import WORKER, spec, started_ids


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
    with workers_of(request) as started:
        yield started


@pytest.fixture
def env(pg_dsn, pg_queue):
    def make(**overrides):
        return worker_env(pg_dsn, pg_queue.table, **overrides)

    return make


@pytest.fixture
def long_task(side, workers, pg_dsn, pg_autocommit):
    """``long_task(worker_env, key, sleep, name, until=None)``: (the task's id, the worker
    process), once the worker (started with ``worker_env``) has started the task; it sleeps
    ``sleep`` seconds, or until the file ``until`` exists."""

    def start(worker_env, key: str, sleep: float, name: str, until: str | None = None):
        steer = dict(sleep=sleep, sleep_on=[1], started=True)
        if until is not None:
            steer["until"] = until  # or less: until the test makes that file
        [task] = enqueue(pg_dsn, side.table, [dict(payload=spec(**steer), chave_externa=key)])
        worker = workers.start(WORKER, worker_env, name)
        wait_for(
            lambda: started_ids(pg_autocommit, side) == [task], 15, f"the {name} to start the task"
        )
        return task, worker

    return start
