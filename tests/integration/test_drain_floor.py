"""benchmarks/drain_floor.py: the floor rows of bench_pgqueuer.py drain every task once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def floor_module():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import drain_floor

        yield drain_floor
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("one_write", [False, True], ids=["two-writes", "one-write"])
@pytest.mark.parametrize("clients", [1, 3])
def test_floor_drains_every_task_once_on_postgres(floor_module, pg_dsn, clients, one_write):
    db = floor_module.Database("postgres", pg_dsn)
    # floor_drain raises unless the clients' claims add up to the tasks exactly.
    assert floor_module.floor_drain(db, clients, 230, batch=50, one_write=one_write) > 0


@pytest.mark.parametrize("one_write", [False, True], ids=["two-writes", "one-write"])
@pytest.mark.parametrize("clients", [1, 3])
def test_floor_drains_every_task_once_on_mariadb(floor_module, mysql_dsn, clients, one_write):
    db = floor_module.Database("mariadb", mysql_dsn)
    assert floor_module.floor_drain(db, clients, 230, batch=50, one_write=one_write) > 0


@pytest.mark.parametrize("one_write", [False, True], ids=["two-writes", "one-write"])
def test_floor_claims_each_row_once_and_settles_it(floor_module, mysql_dsn, pg_dsn, one_write):
    """One client's loop by hand: every row 'sucesso', each claimed by one group."""
    from nsj_queue_lib import QueueClient

    for db in (
        floor_module.Database("postgres", pg_dsn),
        floor_module.Database("mariadb", mysql_dsn),
    ):
        chosen = floor_module._pg_loop if db.kind == "postgres" else floor_module._mariadb_loop

        def loop(conn, table, batch, chosen=chosen):
            return chosen(conn, table, batch, one_write)

        with db.fresh_queue() as table:
            conn = db.connect()
            try:
                QueueClient(conn, table).insert_tasks(floor_module.task_rows(120))
                conn.commit()
                assert loop(conn, table, 50) == 120
                statuses = db.execute(conn, f"SELECT status, count(*) FROM {table} GROUP BY status")
                conn.commit()
            finally:
                conn.close()
        assert [(s, int(n)) for s, n in statuses] == [("sucesso", 120)]
