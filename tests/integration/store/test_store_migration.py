"""A populated plain queue table moved to the partitioned layout (db/postgres/migration.py).

What the migration keeps: every row (history in the legacy partition, the backlog in the
hot one), the ids' sequence, the indexes (adopted, valid), the lock key (the old oid, from
the table's comment), and the answers of the BI queries the docs give. What it refuses:
a table something else depends on, before changing anything. Workers running through it
are in tests/acceptance/test_partition_migration.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nsj_queue_lib.db.dialect import DdlNames
from nsj_queue_lib.db.postgres import migration, retention
from nsj_queue_lib.db.postgres.store import PostgresQueueStore
from nsj_queue_lib.db.side_store import SidePurge
from nsj_queue_lib.db_gen import render
from tests.helpers.databases import connect_pg

DOCS = Path(__file__).resolve().parents[3] / "docs"
HISTORY = 3000
BACKLOG = 300


def _bi_queries(table: str) -> list[str]:
    """The SQL blocks of the docs that read the queue's name (queue-table.md, lifecycle.md)."""
    found = []
    for page in ("reference/queue-table.md", "lifecycle.md"):
        for block in re.findall(r"```sql\n(.*?)```", (DOCS / page).read_text(), re.S):
            if "FROM fila" in block or "FROM public.fila" in block:
                found.append(re.sub(r"\b(public\.)?fila\b", table, block))
    assert len(found) >= 2
    return found


def _fill(conn, table: str) -> None:
    """History over the last days (finished attempts) and a backlog, with a retry whose
    payload stays on its first attempt."""
    conn.execute(
        f"INSERT INTO {table} (processo, status, payload, tentativa, data_hora, started_at, "
        f"finished_at, worker) SELECT 'p' || (g % 3), CASE WHEN g % 7 = 0 THEN 'falha' "
        f"ELSE 'sucesso' END, 'h' || g, 1, now() - make_interval(mins => g), "
        f"now() - make_interval(mins => g), now() - make_interval(mins => g), 'w' "
        f"FROM generate_series(1, {HISTORY}) AS g"
    )
    conn.execute(
        f"INSERT INTO {table} (processo, payload) SELECT 'p', 'b' || g "
        f"FROM generate_series(1, {BACKLOG}) AS g"
    )
    [(first,)] = conn.execute(
        f"INSERT INTO {table} (processo, status, payload) VALUES ('r', 'falha', 'first') "
        f"RETURNING id"
    ).fetchall()
    conn.execute(
        f"INSERT INTO {table} (processo, status, id_inicial, tentativa) "
        f"VALUES ('r', 'agendada', %s, 2)",
        (first,),
    )


def _answers(conn, queries: list[str]) -> list[list[tuple]]:
    return [sorted(conn.execute(q).fetchall(), key=repr) for q in queries]


def test_the_migration_keeps_every_row_the_lock_key_and_the_bi_answers(pg_queue, pg_admin):
    table, names = pg_queue.table, DdlNames("public", pg_queue.name)
    _fill(pg_admin, table)
    old_oid = pg_admin.execute("SELECT %s::regclass::oid::bigint", (table,)).fetchone()[0]
    queries = _bi_queries(table)
    before = _answers(pg_admin, queries)
    top = pg_admin.execute(f"SELECT max(id) FROM {table}").fetchone()[0]

    report = migration.migrate(pg_admin, names)

    assert report is not None and report.moved == BACKLOG + 1 and report.swap_attempts == 1
    where = dict(
        pg_admin.execute(
            f"SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1"
        ).fetchall()
    )
    assert where[f"{pg_queue.name}_legacy"] == HISTORY + 1
    assert where[f"{pg_queue.name}_hot"] == BACKLOG + 1
    assert _answers(pg_admin, queries) == before
    # The retry carries its first attempt's payload, which the legacy purge may delete.
    assert pg_admin.execute(
        f"SELECT payload FROM {table} WHERE status = 'agendada'"
    ).fetchone() == ("first",)
    # Every index of the new table is valid, and covers the legacy partition too.
    invalid = pg_admin.execute(
        "SELECT i.indexrelid::regclass::text FROM pg_index AS i JOIN pg_inherits AS h "
        "ON h.inhrelid = i.indrelid WHERE h.inhparent = %s::regclass AND NOT i.indisvalid",
        (table,),
    ).fetchall()
    assert invalid == []
    parent_indexes = pg_admin.execute(
        "SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass", (table,)
    ).fetchone()[0]
    legacy_adopted = pg_admin.execute(
        "SELECT count(*) FROM pg_inherits AS h JOIN pg_index AS i ON i.indexrelid = h.inhrelid "
        "WHERE i.indrelid = %s::regclass",
        (f"{table}_legacy",),
    ).fetchone()[0]
    assert legacy_adopted == parent_indexes
    # New ids continue the old sequence; a new task lands in the hot partition.
    [(new_id, day)] = pg_admin.execute(
        f"INSERT INTO {table} (processo, payload) VALUES ('p', 'n') RETURNING id, finished_day"
    ).fetchall()
    assert new_id > top and day == 1
    # Workers bound after the swap keep the old table's lock key.
    store = PostgresQueueStore(table)
    assert store.bind(pg_admin) == old_oid and store.partitioned
    # Run again: nothing to do.
    assert migration.migrate(pg_admin, names) is None


def test_a_claim_and_settle_work_on_the_migrated_table(pg_queue, pg_admin, pg_dsn):
    table = pg_queue.table
    _fill(pg_admin, table)
    migration.migrate(pg_admin, DdlNames("public", pg_queue.name))
    store = PostgresQueueStore(table)
    with connect_pg(pg_dsn, "psycopg", autocommit=True) as conn:
        store.bind(conn)
        done = []
        for _ in range(3):
            store.begin(conn)
            claimed = store.claim(conn)
            assert claimed is not None
            assert store.complete_if_running(conn, claimed.task.id, "ok")
            store.commit(conn)
            done.append(claimed.task.id)
    rows = pg_admin.execute(
        f"SELECT status, tableoid::regclass::text FROM {table} WHERE id = ANY(%s)", (done,)
    ).fetchall()
    day = pg_admin.execute(retention.TODAY).fetchone()[0]
    assert rows == [("sucesso", f"{pg_queue.name}_p{day}")] * 3


def test_a_worker_bound_before_the_migration_rotates_the_partitions_from_its_next_purge(
    pg_queue, pg_admin, pg_dsn
):
    """Its store read the plain layout at bind: its purge must find the partitioned one, or
    no day would be attached ahead once the migration's ran out."""
    table = pg_queue.table
    _fill(pg_admin, table)
    store = PostgresQueueStore(table)
    with connect_pg(pg_dsn, "psycopg", autocommit=True) as conn:
        store.bind(conn)
        assert not store.partitioned
        migration.migrate(pg_admin, DdlNames("public", pg_queue.name))
        ahead = retention.days(pg_admin, table)
        last = max(ahead)
        pg_admin.execute(f"DROP TABLE {ahead[last][0]}")
        store.purge_round(conn, max_age_days=30, limit=100)
        assert store.partitioned
        assert last in retention.days(pg_admin, table)  # attached again by the rotation
        # Its claims are pinned to the hot partition now.
        store.begin(conn)
        claimed = store.claim(conn)
        assert claimed is not None
        assert store.complete_if_running(conn, claimed.task.id, "ok")
        store.commit(conn)


def test_a_view_on_the_table_refuses_the_migration_before_any_change(pg_queue, pg_admin):
    table = pg_queue.table
    pg_admin.execute(f"CREATE VIEW {table}_report AS SELECT id, status FROM {table}")
    try:
        with pytest.raises(migration.MigrationRefused, match=f"view public.{pg_queue.name}_report"):
            migration.migrate(pg_admin, DdlNames("public", pg_queue.name))
        columns = pg_admin.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_name = %s AND column_name = 'finished_day'",
            (pg_queue.name,),
        ).fetchone()[0]
        assert columns == 0
    finally:
        pg_admin.execute(f"DROP VIEW {table}_report")


def test_the_legacy_partition_is_purged_in_rounds_then_dropped(pg_queue, pg_admin):
    table = pg_queue.table
    _fill(pg_admin, table)
    pg_admin.execute(
        f"UPDATE {table} SET data_hora = data_hora - interval '10 days' WHERE id % 2 = 0"
    )
    migration.migrate(pg_admin, DdlNames("public", pg_queue.name))
    legacy = f"{table}_legacy"
    expired = pg_admin.execute(
        f"SELECT count(*) FROM {legacy} WHERE data_hora < now() - interval '5 days'"
    ).fetchone()[0]
    assert expired > 1000
    purged = retention.rotate(pg_admin, table, max_age_days=5, limit=1000)
    assert purged == 1000
    while retention.rotate(pg_admin, table, max_age_days=5, limit=1000):
        pass
    left = pg_admin.execute(f"SELECT count(*) FROM {legacy}").fetchone()[0]
    assert left == HISTORY + 1 - expired
    # Its newest row expired: the partition goes whole, the backlog stays.
    retention.rotate(pg_admin, table, max_age_days=0, limit=1000)
    assert pg_admin.execute("SELECT to_regclass(%s)", (legacy,)).fetchone() == (None,)
    assert pg_admin.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == BACKLOG + 1


def test_the_printed_upgrade_of_a_plain_table_for_the_partitioned_layout_says_how(
    pg_queue, pg_admin
):
    import psycopg

    with pytest.raises(
        psycopg.errors.RaiseException, match="nsjq upgrade --apply --layout partitioned"
    ):
        pg_admin.execute(render("public", pg_queue.name, upgrade=True, layout="partitioned"))


def test_the_legacy_partition_s_side_rows_go_with_its_rows(pg_queue, pg_admin):
    """Rounds of the legacy partition take their tasks' checkpoints with them; its drop
    walks it first, and keeps those of the retry that still waits (db/side_store.py)."""
    table = pg_queue.table
    _fill(pg_admin, table)
    pg_admin.execute(
        f"UPDATE {table} SET data_hora = data_hora - interval '10 days' WHERE id % 2 = 0"
    )
    pg_admin.execute(
        f"INSERT INTO {table}_steps (task_id, name, result, attempt_id) "
        f"SELECT id, 's', '1', id FROM {table} WHERE id_inicial IS NULL"
    )
    migration.migrate(pg_admin, DdlNames("public", pg_queue.name))
    sides = SidePurge.for_run(PostgresQueueStore(table), pg_admin, 1000)
    while retention.rotate(pg_admin, table, max_age_days=5, limit=1000, sides=sides):
        pass
    orphans = (
        f"SELECT count(*) FROM {table}_steps AS s "
        f"WHERE NOT EXISTS (SELECT 1 FROM {table} AS q WHERE q.id = s.task_id)"
    )
    assert pg_admin.execute(orphans).fetchone() == (0,)
    assert sides is not None and sides.cleared > 1000
    retention.rotate(pg_admin, table, max_age_days=0, limit=1000, sides=sides)
    first = f"SELECT id_inicial FROM {table} WHERE status = 'agendada'"
    [(waiting_first,)] = pg_admin.execute(first).fetchall()
    steps = pg_admin.execute(f"SELECT task_id FROM {table}_steps").fetchall()
    # The backlog's own, and the waiting retry's first attempt's (gone with the legacy).
    assert (waiting_first,) in steps
    assert pg_admin.execute(orphans).fetchone() == (1,)
