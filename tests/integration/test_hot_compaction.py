"""The vacuum service rewrites a bloated hot partition (runtime/vacuum.py), on real PostgreSQL.

The hot partition is bloated the way a held snapshot leaves it: many rows written and
gone (here deleted), so that after VACUUM the file keeps its size. The queues live in a
database of their own: PostgreSQL keeps a table's dead versions only for the snapshots of
its own database's sessions, so the parallel tests' transactions do not hold them.
"""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from nsj_queue_lib.runtime.vacuum import COMPACT_MIN_BYTES, VacuumService
from tests.helpers import databases, services
from tests.helpers.processes import settings_for

ROWS = 40_000  # about 16 MB with the payload below: past COMPACT_MIN_BYTES


@pytest.fixture
def own_dsn(pg_admin, pg_dsn):
    name = f"nsjq_compact_{uuid.uuid4().hex[:12]}"
    pg_admin.execute(f"CREATE DATABASE {name}")
    try:
        yield make_conninfo(pg_dsn, dbname=name)
    finally:
        pg_admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def partitioned(own_dsn):
    with psycopg.connect(own_dsn, autocommit=True) as admin:
        yield databases.create_queue(
            admin, own_dsn, layout="partitioned", days=databases.FEW_DAYS_AHEAD
        )


@pytest.fixture
def autocommit(own_dsn):
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        yield conn


def hot_size(conn, hot: str) -> int:
    return int(conn.execute("SELECT pg_total_relation_size(%s)", (hot,)).fetchone()[0])


def fill(conn, table: str) -> None:
    conn.execute(
        f"INSERT INTO {table} (processo, payload) "
        f"SELECT 'p', repeat('x', 300) FROM generate_series(1, {ROWS})"
    )


def empty(conn, table: str) -> None:
    conn.execute(f"DELETE FROM {table} WHERE processo = 'p'")
    conn.execute("SELECT pg_stat_force_next_flush()")


def test_a_bloated_hot_partition_is_rewritten_after_its_vacuum(partitioned, own_dsn, autocommit):
    table, hot = partitioned.table, f"{partitioned.table}_hot"
    fill(autocommit, table)
    autocommit.execute(f"INSERT INTO {table} (processo, payload) VALUES ('kept', 'k')")
    empty(autocommit, table)
    bloated = hot_size(autocommit, hot)
    assert bloated > COMPACT_MIN_BYTES

    service = services.make_service(
        VacuumService, settings_for(own_dsn, table, queue_vacuum_dead_rows=1000)
    )
    assert service.run_once() >= ROWS
    # Rewritten by that cycle, or (when another session still held the dead versions, or
    # the lock was not granted in time) by a later one, as the service's next cycles do.
    deadline = time.monotonic() + 20
    while hot_size(autocommit, hot) >= bloated / 20 and time.monotonic() < deadline:
        time.sleep(0.2)
        service.run_once()
    after = hot_size(autocommit, hot)
    assert after < bloated / 20, (bloated, after)
    # The rewrite kept the backlog.
    assert autocommit.execute(f"SELECT processo FROM {hot}").fetchall() == [("kept",)]


def test_dead_versions_a_snapshot_still_sees_are_not_rewritten(partitioned, own_dsn, autocommit):
    table, hot = partitioned.table, f"{partitioned.table}_hot"
    fill(autocommit, table)
    with psycopg.connect(own_dsn) as holder:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute(f"SELECT count(*) FROM {hot}").fetchone()  # the snapshot, held
        empty(autocommit, table)
        bloated = hot_size(autocommit, hot)
        service = services.make_service(
            VacuumService, settings_for(own_dsn, table, queue_vacuum_dead_rows=1000)
        )
        assert service.run_once() >= ROWS  # vacuumed, but the rows were kept for the snapshot
        assert hot_size(autocommit, hot) >= bloated
        holder.rollback()


def test_the_rewrite_gives_up_when_its_lock_is_not_granted(partitioned, own_dsn):
    table, hot = partitioned.table, f"{partitioned.table}_hot"
    service = services.make_service(VacuumService, settings_for(own_dsn, table))
    with psycopg.connect(own_dsn) as holder, psycopg.connect(own_dsn, autocommit=True) as conn:
        holder.execute(f"SELECT count(*) FROM {hot}").fetchone()  # ACCESS SHARE, held
        started = time.monotonic()
        assert service.store.compact_hot(conn, 100) is False
        assert time.monotonic() - started < 5
        holder.rollback()
        assert service.store.compact_hot(conn, 100) is True
        # The session's own lock_timeout is back to its default.
        assert conn.execute("SHOW lock_timeout").fetchone()[0] == "0"


def test_the_plain_layout_has_no_hot_partition_to_rewrite(pg_queue, pg_dsn):
    service = services.make_service(VacuumService, settings_for(pg_dsn, pg_queue.table))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert service.store.hot_space(conn) is None
        with pytest.raises(RuntimeError, match="no hot partition"):
            service.store.compact_hot(conn, 100)
