"""Worker processes survive a database outage: while idle and while busy, then resume.

These tests stop and start a PostgreSQL of their own (``ThrowawayPostgres``,
pgserver's binaries in a temporary directory); the shared test database is
never restarted. During the outage the workers must stay up without spinning
(their CPU time is measured), and afterwards every task ends 'sucesso',
committed exactly once.
"""

from __future__ import annotations

import json
import signal
import time

import psycopg
import pytest

from tests.helpers import databases
from tests.helpers.endpoints import free_port, get_json
from tests.helpers.processes import (
    ThrowawayPostgres,
    Workers,
    create_side_tables,
    drop_side_tables,
    wait_for,
    worker_env,
    workers_of,
)
from tests.helpers.recorder import WORKER, insert_many

# One worker runs the module: its private PostgreSQL starts once (a module fixture).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("database_restart")]

# CPU seconds a worker may use while the database is down: reconnecting with
# back-off costs milliseconds; a busy loop would burn the whole outage.
MAX_OUTAGE_CPU_SHARE = 0.2


@pytest.fixture(scope="module")
def private_pg():
    try:
        server = ThrowawayPostgres()
    except Exception as exc:  # no pgserver, or it cannot start here
        reason = f"cannot start a private PostgreSQL to restart: {exc}"
        if databases.ci_enabled():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    yield server
    server.close()


def query(dsn: str, sql: str, params=None):
    """Rows of ``sql`` on a new connection, or None while the database is unreachable."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
            return conn.execute(sql, params).fetchall()
    except psycopg.OperationalError:
        return None


def listening(dsn: str, channel: str) -> int:
    rows = query(
        dsn, "SELECT count(*) FROM pg_stat_activity WHERE query = %s", (f'LISTEN "{channel}"',)
    )
    return rows[0][0] if rows else 0


@pytest.fixture
def queue(private_pg):
    with psycopg.connect(private_pg.dsn, autocommit=True) as admin:
        made = databases.create_queue(admin, private_pg.dsn)
        create_side_tables(admin, made.table)
    yield made
    if not private_pg.running:
        private_pg.start()
    with psycopg.connect(private_pg.dsn, autocommit=True) as admin:
        drop_side_tables(admin, made.table)
        databases.drop_queue(admin, made)


@pytest.fixture
def workers(request, queue):
    with workers_of(request) as started:
        yield started


def start_workers(workers: Workers, private_pg, queue, count: int) -> list:
    env = worker_env(
        private_pg.dsn,
        queue.table,
        QUEUE_CONCURRENCY=2,
        QUEUE_RETRY_THREAD_INTERVAL=1,
        QUEUE_NOTIFY_THREAD_INTERVAL=1,
        QUEUE_WAIT_NOTIFY_INTERVAL=1,
    )
    procs = [workers.start(WORKER, env) for _ in range(count)]
    wait_for(
        lambda: listening(private_pg.dsn, queue.name) == count, 15, f"{count} workers to LISTEN"
    )
    return procs


def outage(private_pg, procs, seconds: float, mode: str) -> None:
    """Stop the database for ``seconds``; the workers must stay up and quiet meanwhile."""
    before = [proc.cpu_seconds() for proc in procs]
    private_pg.stop(mode)
    time.sleep(seconds)  # the outage itself, not a wait for a condition
    assert all(proc.alive() for proc in procs), "a worker exited during the outage"
    used = [proc.cpu_seconds() - b for proc, b in zip(procs, before, strict=True)]
    assert max(used) < seconds * MAX_OUTAGE_CPU_SHARE, (
        f"CPU seconds used during a {seconds} s outage: {used}"
    )
    private_pg.start()


def settled(dsn: str, table: str, total: int) -> bool:
    rows = query(
        dsn,
        f"SELECT count(*) FILTER (WHERE status = 'sucesso'), "
        f"count(*) FILTER (WHERE status IN ('pendente', 'agendada', 'processando')) FROM {table}",
    )
    return rows is not None and rows[0] == (total, 0)


def check_exactly_once(dsn: str, table: str, total: int) -> None:
    # One successful attempt per task, and exactly one committed execution, the successful one's.
    per_chain = query(
        dsn,
        f"SELECT coalesce(id_inicial, id), count(*) FILTER (WHERE status = 'sucesso') "
        f"FROM {table} GROUP BY 1",
    )
    assert len(per_chain) == total and {n for _, n in per_chain} == {1}
    executions = query(
        dsn,
        f"SELECT count(*), count(DISTINCT e.task_id), "
        f"count(*) FILTER (WHERE q.status = 'sucesso') "
        f"FROM {table}_exec e LEFT JOIN {table} q ON q.id = e.task_id",
    )
    assert executions == [(total, total, total)]


def stop_all(procs) -> None:
    for proc in procs:
        proc.send(signal.SIGTERM)
    assert [proc.wait(15) for proc in procs] == [0] * len(procs)


def test_idle_workers_survive_a_database_restart(private_pg, queue, workers):
    procs = start_workers(workers, private_pg, queue, 2)
    outage(private_pg, procs, 3.0, "fast")
    # Back: tasks enqueued now are run (the workers reconnected and LISTEN again).
    insert_many(private_pg.dsn, queue.table, 100)
    wait_for(
        lambda: settled(private_pg.dsn, queue.table, 100),
        30,
        "100 tasks to succeed after the restart",
    )
    check_exactly_once(private_pg.dsn, queue.table, 100)
    wait_for(lambda: listening(private_pg.dsn, queue.name) == 2, 15, "both workers to LISTEN again")

    # A stop requested while the database is down still ends the workers at once, with 0.
    private_pg.stop("fast")
    sent = time.monotonic()
    stop_all(procs)
    assert time.monotonic() - sent < 10


def test_busy_workers_survive_a_database_crash(private_pg, queue, workers):
    procs = start_workers(workers, private_pg, queue, 2)
    insert_many(private_pg.dsn, queue.table, 300, json.dumps({"sleep": 0.02}))
    progress = (
        f"SELECT count(*) FILTER (WHERE status = 'sucesso') >= 60 "
        f"AND count(*) FILTER (WHERE status = 'processando') > 0 FROM {queue.table}"
    )
    wait_for(
        lambda: (query(private_pg.dsn, progress) or [(False,)])[0][0],
        20,
        "the workers to be busy draining (60 done, some running)",
    )
    outage(private_pg, procs, 2.0, "immediate")  # a crash: no session is told anything
    wait_for(
        lambda: settled(private_pg.dsn, queue.table, 300),
        45,
        "all 300 tasks to succeed after the crash (interrupted attempts retried)",
    )
    check_exactly_once(private_pg.dsn, queue.table, 300)
    stop_all(procs)


def test_readyz_follows_the_database_and_healthz_does_not(private_pg, queue, workers):
    """/readyz is 503 while the database is down and 200 again once the worker reconnected;
    /healthz stays 200 throughout: a database outage is no reason to restart a worker."""
    port = free_port()
    env = worker_env(private_pg.dsn, queue.table, QUEUE_METRICS_PORT=port)
    proc = workers.start(WORKER, env)
    wait_for(lambda: get_json(port, "/readyz")[0] == 200, 15, "/readyz to be 200")
    private_pg.stop("fast")
    status, answer = wait_for(
        lambda: (found := get_json(port, "/readyz"))[0] == 503 and found, 10, "/readyz to be 503"
    )
    assert "not connected" in answer["reason"], answer
    assert get_json(port, "/healthz") == (200, {"status": "ok"})
    private_pg.start()
    wait_for(lambda: get_json(port, "/readyz")[0] == 200, 20, "/readyz to be 200 again")
    stop_all([proc])
