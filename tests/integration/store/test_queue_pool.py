"""The store suite's queue pool (queue_pool.py) hands a used queue to the next test only
when the test changed nothing of its catalog, and empties it as a fresh one is."""

from __future__ import annotations

import pytest

from tests.helpers import databases, queue_pool
from tests.helpers import mysql_queue as mysql_helpers

PG_CHANGES = [
    "ALTER TABLE {table} ADD COLUMN extra integer",
    "CREATE INDEX {name}_extra ON {table} (processo)",
    "ALTER TABLE {table} SET (autovacuum_vacuum_scale_factor = 0.5)",
    "COMMENT ON TABLE {table} IS 'nsjq.lock_key=1'",
    "ALTER TABLE {table} DISABLE TRIGGER USER",
    "CREATE TABLE {table}_more (id int)",
    "DROP TABLE {table}_workers",
    "CREATE VIEW v_{name} AS SELECT id FROM {table}",
    "CREATE OR REPLACE FUNCTION {schema}.notify_{name}_insert() RETURNS trigger "
    "LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
]


@pytest.mark.parametrize("change", PG_CHANGES)
def test_a_postgresql_catalog_change_is_seen(pg_queue, pg_admin, change):
    before = queue_pool.pg_fingerprint(pg_admin, pg_queue)
    pg_admin.execute(
        f"INSERT INTO {pg_queue.table} (origem, destino, processo, chave_externa, payload) "
        "VALUES ('o', 'd', 'p', 'k', 'x')"
    )
    assert queue_pool.pg_fingerprint(pg_admin, pg_queue) == before  # rows are no change
    sql = change.format(table=pg_queue.table, name=pg_queue.name, schema=pg_queue.schema)
    pg_admin.execute(sql)
    try:
        assert queue_pool.pg_fingerprint(pg_admin, pg_queue) != before
    finally:
        pg_admin.execute(f"DROP VIEW IF EXISTS v_{pg_queue.name}")


def test_an_emptied_postgresql_queue_starts_again_from_id_1(pg_partitioned_queue, pg_admin):
    queue = pg_partitioned_queue
    insert = (
        f"INSERT INTO {queue.table} (origem, destino, processo, chave_externa, payload) "
        "VALUES ('o', 'd', 'p', 'k', 'x') RETURNING id"
    )
    assert pg_admin.execute(insert).fetchone()[0] == 1
    pg_admin.execute(f"UPDATE {queue.table} SET status = 'sucesso'")  # to a day partition
    queue_pool.pg_empty(pg_admin, queue)
    assert databases.count_rows(pg_admin, queue.table) == 0
    assert pg_admin.execute(insert).fetchone()[0] == 1


MYSQL_CHANGES = [
    "ALTER TABLE {table} ADD COLUMN extra integer",
    "CREATE INDEX {name}_extra ON {table} (processo)",
    "ALTER TABLE {table} COMMENT 'changed'",
    "CREATE TABLE {table}_more (id int)",
    "DROP TABLE {table}_workers",
    "DROP PROCEDURE {database}.release_{name}",
    "CREATE TRIGGER {database}.{name}_t BEFORE INSERT ON {table} FOR EACH ROW SET NEW.payload = 'y'",
]


@pytest.mark.mysql
@pytest.mark.parametrize("change", MYSQL_CHANGES)
def test_a_mariadb_catalog_change_is_seen(mysql_queue, mysql_admin, change):
    before = queue_pool.mysql_fingerprint(mysql_admin, mysql_queue)
    with mysql_admin.cursor() as cur:
        cur.execute(
            f"INSERT INTO {mysql_queue.table} (origem, destino, processo, chave_externa, payload) "
            "VALUES ('o', 'd', 'p', 'k', 'x')"
        )
    assert queue_pool.mysql_fingerprint(mysql_admin, mysql_queue) == before
    sql = change.format(
        table=mysql_queue.table, name=mysql_queue.name, database=mysql_queue.database
    )
    with mysql_admin.cursor() as cur:
        cur.execute(sql)
    try:
        assert queue_pool.mysql_fingerprint(mysql_admin, mysql_queue) != before
    finally:
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {mysql_queue.table}_more")


@pytest.mark.mysql
def test_an_emptied_mariadb_queue_starts_again_from_id_1(mysql_partitioned_queue, mysql_admin):
    queue = mysql_partitioned_queue
    insert = (
        f"INSERT INTO {queue.table} (origem, destino, processo, chave_externa, payload) "
        "VALUES ('o', 'd', 'p', 'k', 'x')"
    )
    for _ in range(2):
        with mysql_admin.cursor() as cur:
            cur.execute(insert)
            assert cur.lastrowid == 1
            cur.execute(f"UPDATE {queue.table} SET status = 'sucesso' WHERE finished_day = 1")
        queue_pool.mysql_empty(mysql_admin, queue)
        assert mysql_helpers.count_rows(mysql_admin, queue.table) == 0
