"""Fixtures of the in-process worker tests on PostgreSQL."""

from __future__ import annotations

import pytest

from tests.helpers.processes import (
    InProcessWorker,
    create_side_tables,
    drop_side_tables,
    start_function_worker,
)


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


@pytest.fixture
def side(pg_queue, pg_admin):
    """``<queue>_exec``: the handlers' own writes, which must commit (or roll back) with the task."""
    create_side_tables(pg_admin, pg_queue.table)
    yield f"{pg_queue.table}_exec"
    drop_side_tables(pg_admin, pg_queue.table)
