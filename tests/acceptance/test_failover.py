"""Failover: a primary stopped mid-drain, its streaming replica promoted, workers carry on.

The test builds a private primary and a streaming replica of it
(``pg_basebackup -R``), starts two worker processes whose DB_HOST/DB_PORT
list both servers (per-host ports) with DB_TARGET_SESSION_ATTRS=read-write,
and stops the primary (``pg_ctl stop -m fast``: running sessions get
AdminShutdown) while the workers drain, then promotes the replica
(``pg_ctl promote``). Every task must end 'sucesso' exactly once on the new
primary, and the workers must resume within seconds. The attempts cut by
the failover are released for an attempt due at once: with a 10-minute
back-off for handler failures, the drain could not finish in time otherwise.
The timings are printed (run with ``-s`` to see them).
"""

from __future__ import annotations

import json
import time

import psycopg
import pytest

from tests.acceptance.test_database_restart import check_exactly_once, query, settled, stop_all
from tests.helpers import databases
from tests.helpers.private_servers import PrivatePostgres, temporary_directory
from tests.helpers.processes import create_side_tables, wait_for, worker_env, workers_of
from tests.helpers.recorder import WORKER, insert_many

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TASKS = 400
MAX_RESUME_SECONDS = 10


@pytest.fixture
def pair():
    """(primary, replica), both running; the replica streams from the primary."""
    with temporary_directory("nsjq-failover-") as directory:
        servers = []
        try:
            servers.append(PrivatePostgres(directory / "primary"))
            servers.append(PrivatePostgres(directory / "replica", primary=servers[0]))
        except Exception as exc:  # no binaries or they cannot start here
            for server in servers:
                server.close()
            reason = f"cannot start a private primary and replica: {exc}"
            if databases.ci_enabled():
                pytest.fail(reason, pytrace=False)
            pytest.skip(reason)
        yield tuple(servers)
        for server in servers:
            server.close()


@pytest.fixture
def workers(request):
    with workers_of(request) as started:
        yield started


def done(dsn: str, table: str) -> int | None:
    rows = query(dsn, f"SELECT count(*) FROM {table} WHERE status = 'sucesso'")
    return None if rows is None else rows[0][0]


def test_workers_follow_a_promoted_replica_and_end_every_task_once(pair, workers):
    primary, replica = pair
    with psycopg.connect(primary.dsn, autocommit=True) as admin:
        queue = databases.create_queue(admin, primary.dsn)
        create_side_tables(admin, queue.table)
    env = worker_env(
        primary.dsn,
        queue.table,
        DB_HOST="127.0.0.1,127.0.0.1",
        DB_PORT=f"{primary.port},{replica.port}",
        DB_TARGET_SESSION_ATTRS="read-write",
        QUEUE_CONCURRENCY=2,
        QUEUE_BASE_INTERVAL_RETRY=10,  # minutes: a cut attempt must not wait for this
        QUEUE_RETRY_THREAD_INTERVAL=1,
    )
    procs = [workers.start(WORKER, env, f"worker-{i}") for i in range(2)]
    insert_many(primary.dsn, queue.table, TASKS, json.dumps({"sleep": 0.01}))
    wait_for(lambda: (done(primary.dsn, queue.table) or 0) >= 60, 30, "the drain to be under way")

    stopped_at = time.monotonic()
    primary.stop("fast")
    replica.promote()
    promoted_at = time.monotonic()
    at_promotion = done(replica.dsn, queue.table) or 0
    wait_for(
        lambda: (done(replica.dsn, queue.table) or 0) > at_promotion,
        MAX_RESUME_SECONDS,
        "the workers to resume on the promoted replica",
    )
    resumed_at = time.monotonic()
    wait_for(lambda: settled(replica.dsn, queue.table, TASKS), 45, f"all {TASKS} tasks to end")
    finished_at = time.monotonic()

    check_exactly_once(replica.dsn, queue.table, TASKS)
    [(handler_failures, released)] = query(
        replica.dsn,
        f"SELECT count(*) FILTER (WHERE status = 'falha'), "
        f"count(*) FILTER (WHERE status = 'falha_processando') FROM {queue.table}",
    )
    assert handler_failures == 0
    print(
        f"\nfailover: {at_promotion} of {TASKS} done at the stop; primary stopped and replica "
        f"promoted in {promoted_at - stopped_at:.2f} s; first task done on the new primary "
        f"{resumed_at - promoted_at:.2f} s after the promotion; all done "
        f"{finished_at - promoted_at:.2f} s after it; {released} attempts released by the cut"
    )
    stop_all(procs)
