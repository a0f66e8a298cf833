"""Fixtures of the in-process worker tests on PostgreSQL."""

from __future__ import annotations

import pytest

from tests.helpers.processes import InProcessWorker, start_function_worker


@pytest.fixture
def start_worker(pg_queue, pg_dsn, pg_autocommit):
    """start_worker(execute, execute_dead=None, wait_listening=True, **settings) -> InProcessWorker."""
    started: list[InProcessWorker] = []

    def start(execute, execute_dead=None, wait_listening=True, **changes):
        worker = start_function_worker(
            pg_dsn, pg_queue, pg_autocommit, execute, execute_dead, wait_listening, **changes
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.alive():
            worker.stop()
