"""The vacuum service on MariaDB/MySQL: after a burst, ``ANALYZE TABLE`` brings InnoDB's
persistent statistics up to date (db/mysql/statistics.py).

Each queue table here is set ``STATS_AUTO_RECALC = 0``: it stands for a table with weeks of
history, where a burst never reaches the tenth of the table that makes InnoDB recalculate by
itself (on a new, small table InnoDB would do so in the background, at a moment of its own).
"""

from __future__ import annotations

import pytest

from nsj_queue_lib.db.mysql.store import MysqlQueueStore
from nsj_queue_lib.runtime.vacuum import VacuumService
from tests.helpers import services
from tests.helpers.databases import unique_queue_name
from tests.helpers.mysql_queue import connect, fetch_value, mysql_settings

pytestmark = pytest.mark.mysql

BURST = 300


@pytest.fixture
def table(mysql_queue, mysql_admin):
    qualified = f"{mysql_queue.database}.{mysql_queue.name}"
    with mysql_admin.cursor() as cur:
        cur.execute(f"ALTER TABLE {qualified} STATS_AUTO_RECALC = 0")
        cur.execute(f"ANALYZE TABLE {qualified}")  # the statistics of the empty table
    return qualified


def enqueue_burst(admin, table: str) -> None:
    with admin.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {table} (origem, destino, processo, payload) VALUES (%s, %s, %s, %s)",
            [("teste", "worker", "processar", "p")] * BURST,
        )


def analyzed_rows(admin, table: str) -> int:
    """The row count of the table's persistent statistics: what its last calculation found."""
    database, name = table.split(".")
    return fetch_value(
        admin,
        "SELECT n_rows FROM mysql.innodb_table_stats WHERE database_name = %s AND table_name = %s",
        (database, name),
    )


def make_service(mysql_kwargs, table: str, dead_rows: int) -> VacuumService:
    settings = mysql_settings(mysql_kwargs, table, queue_vacuum_dead_rows=dead_rows)
    service = services.make_service(VacuumService, settings)
    assert isinstance(service, VacuumService)
    return service


def test_vacuum_service_analyzes_a_table_past_its_changed_rows(table, mysql_admin, mysql_kwargs):
    enqueue_burst(mysql_admin, table)
    assert analyzed_rows(mysql_admin, table) == 0  # InnoDB left the statistics as they were

    assert make_service(mysql_kwargs, table, dead_rows=BURST + 1).run_once() == 0
    assert analyzed_rows(mysql_admin, table) == 0  # below its threshold: nothing done

    assert make_service(mysql_kwargs, table, dead_rows=BURST).run_once() == 0  # nothing vacuumed
    assert analyzed_rows(mysql_admin, table) == BURST
    # And InnoDB counts the changes from there again.
    store = MysqlQueueStore(table)
    assert store.table_health(mysql_admin).changed_since_analyze == 0


@pytest.fixture
def unprivileged(mysql_kwargs, mysql_admin, table):
    """A connection of a user without PROCESS, who may read and insert into the queue table:
    what ANALYZE TABLE needs."""
    user, password = unique_queue_name("u_"), "vacuum-test"
    with mysql_admin.cursor() as cur:
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (user, password))
        try:
            cur.execute(f"GRANT SELECT, INSERT ON {table} TO %s@'%%'", (user,))
            conn = connect(dict(mysql_kwargs, user=user, password=password), autocommit=True)
            try:
                yield conn
            finally:
                conn.close()
        finally:
            cur.execute("DROP USER %s@'%%'", (user,))


def test_without_process_the_estimated_row_count_stands_in(table, mysql_admin, unprivileged):
    store = MysqlQueueStore(table)
    assert store.table_health(unprivileged).changed_since_analyze == 0  # the first look
    enqueue_burst(mysql_admin, table)
    health = store.table_health(unprivileged)
    assert (health.changed_since_analyze, health.dead_rows, health.may_maintain) == (
        BURST,
        0,
        True,
    )

    store.analyze(unprivileged)
    assert analyzed_rows(mysql_admin, table) == BURST
    assert store.table_health(unprivileged).changed_since_analyze == 0
