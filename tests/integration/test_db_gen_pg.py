"""The generated DDL on a real PostgreSQL: it applies, notifies, and serves the claim from its index."""

from __future__ import annotations

import json

import psycopg
import pytest

from nsj_queue_lib import model
from nsj_queue_lib.db.dialect import CLAIM_ROUTINE_RELEASE
from nsj_queue_lib.db.postgres.dialect import CLAIM_FUNCTION_ARGS
from nsj_queue_lib.db.postgres.store import PostgresQueueStore
from nsj_queue_lib.db_gen import render
from tests.helpers.databases import (
    busy_row_sql,
    collect_until_sentinel,
    connect_pg,
    create_queue,
    drop_queue,
    queue_catalog,
    unique_queue_name,
)
from tests.helpers.pg_plans import CLAIM_PATHS, claim_plan, plan_nodes


def test_generated_ddl_creates_every_object(pg_queue, pg_autocommit):
    catalog = queue_catalog(pg_autocommit, "public", pg_queue.name)
    assert set(catalog["columns"]) == {*model.QUEUE_COLUMNS, *model.EXTRA_COLUMNS}
    assert set(catalog["indexes"]) >= {
        "{q}_pkey",
        "idx_{q}_claim",
        "idx_{q}_due",
        "idx_{q}_running",
        "idx_{q}_data_hora",
        "idx_{q}_chain",
        "idx_{q}_equivalent",
    }
    assert "WHERE ((status)::text = 'pendente'::text)" in catalog["indexes"]["idx_{q}_claim"]
    assert "(prioridade DESC, data_hora, id)" in catalog["indexes"]["idx_{q}_claim"]
    # Fair shares' look-up of a key's last ready task (fleet/fair.py): keyed rows only.
    fair = catalog["indexes"]["idx_{q}_fair_key"]
    assert "(fair_key, prioridade, data_hora)" in fair and "fair_key IS NOT NULL" in fair
    # The insert trigger, and the end trigger that wakes wait_for_task.
    assert sorted(catalog["triggers"]) == ["trigger_end_{q}", "trigger_insert_{q}"]
    assert set(catalog["subscriber_indexes"]) == {
        "{q}_subscriber_pkey",
        "idx_{q}_subscriber_processo",
    }
    assert "pg_notify('{q}'" in catalog["function"]
    # The worker's claim function, with the planner settings of the claim.
    config = pg_autocommit.execute(
        "SELECT proconfig FROM pg_proc WHERE oid = %s::regprocedure",
        (f"public.claim_next_{pg_queue.name}_v{CLAIM_ROUTINE_RELEASE}{CLAIM_FUNCTION_ARGS}",),
    ).fetchone()[0]
    assert sorted(config) == [
        "enable_bitmapscan=off",
        "enable_seqscan=off",
        "enable_sort=off",
        "jit=off",
        "plan_cache_mode=force_generic_plan",
    ]
    subscriber = pg_autocommit.execute(
        "SELECT array_agg(column_name::text ORDER BY ordinal_position) FROM information_schema.columns "
        "WHERE table_schema = 'public' AND table_name = %s",
        (f"{pg_queue.name}_subscriber",),
    ).fetchone()[0]
    assert subscriber == [*model.SUBSCRIBER_COLUMNS, *model.SUBSCRIBER_BREAKER_COLUMNS]


# What db_gen sets on every queue table (postgres/autovacuum.sql says why).
AUTOVACUUM = {
    "autovacuum_vacuum_scale_factor": "0",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0",
    "autovacuum_analyze_threshold": "10000",
    "autovacuum_vacuum_cost_limit": "1000",
}


def test_the_queue_table_is_autovacuumed_by_fixed_counts_of_rows(pg_queue, pg_autocommit):
    assert queue_catalog(pg_autocommit, "public", pg_queue.name)["options"] == AUTOVACUUM


def test_upgrade_sets_the_autovacuum_settings_an_operator_left_unset(
    pg_queue, pg_admin, pg_autocommit
):
    table = pg_queue.table
    pg_admin.execute(
        f"ALTER TABLE {table} RESET (autovacuum_vacuum_threshold, autovacuum_vacuum_cost_limit)"
    )
    pg_admin.execute(f"ALTER TABLE {table} SET (autovacuum_analyze_threshold = 50000)")
    for _ in range(2):
        pg_admin.execute(render("public", pg_queue.name, upgrade=True))
    options = queue_catalog(pg_autocommit, "public", pg_queue.name)["options"]
    assert options == dict(AUTOVACUUM, autovacuum_analyze_threshold="50000")


def test_upgrade_on_a_current_queue_changes_nothing(pg_queue, pg_admin, pg_autocommit):
    before = queue_catalog(pg_autocommit, "public", pg_queue.name)
    for _ in range(2):
        pg_admin.execute(render("public", pg_queue.name, upgrade=True))
    assert queue_catalog(pg_autocommit, "public", pg_queue.name) == before


def test_upgrade_replaces_indexes_whose_definition_changed(pg_queue, pg_admin, pg_autocommit):
    """Queues made before the purge, chain and equivalent-task indexes became narrower get
    the current definitions."""
    current = queue_catalog(pg_autocommit, "public", pg_queue.name)
    table, q = pg_queue.table, pg_queue.name
    pg_admin.execute(f"DROP INDEX public.idx_{q}_data_hora")
    pg_admin.execute(f"DROP INDEX public.idx_{q}_chain")
    pg_admin.execute(f"DROP INDEX public.idx_{q}_equivalent")
    pg_admin.execute(f"CREATE INDEX idx_{q}_data_hora ON {table} (data_hora)")
    pg_admin.execute(
        f"CREATE INDEX idx_{q}_equivalent ON {table} (chave_externa, payload_hash, status)"
    )
    pg_admin.execute(
        f"CREATE INDEX idx_{q}_chain ON {table} (id_inicial) "
        "WHERE status IN ('pendente', 'agendada', 'processando')"
    )
    assert queue_catalog(pg_autocommit, "public", q)["indexes"] != current["indexes"]
    for _ in range(2):
        pg_admin.execute(render("public", q, upgrade=True))
    assert queue_catalog(pg_autocommit, "public", q) == current


def test_ddl_works_in_another_schema(pg_dsn, pg_admin, pg_autocommit):
    schema = unique_queue_name("s_")
    pg_admin.execute(f"CREATE SCHEMA {schema}")
    try:
        queue = create_queue(pg_admin, pg_dsn, schema=schema)
        catalog = queue_catalog(pg_autocommit, schema, queue.name)
        assert "idx_{q}_claim" in catalog["indexes"]
        assert f"{schema}.notify_" in list(catalog["triggers"].values())[0]
    finally:
        pg_admin.execute(f"DROP SCHEMA {schema} CASCADE")


def test_applying_create_twice_fails_loudly_instead_of_half_applying(pg_queue, pg_admin):
    with pytest.raises(psycopg.errors.DuplicateTable):
        pg_admin.execute(render("public", pg_queue.name))


@pytest.fixture
def listener(pg_dsn, pg_queue):
    conn = connect_pg(pg_dsn, "psycopg", autocommit=True)
    conn.execute(f"LISTEN {pg_queue.name}")
    try:
        yield conn
    finally:
        conn.close()


def _insert(conn, table: str, sql_tail: str = "DEFAULT VALUES") -> None:
    with conn.transaction():
        conn.execute(f"INSERT INTO {table} {sql_tail}")


def test_trigger_notifies_for_a_ready_row(pg_queue, pg_admin, listener, pg_dsn):
    with connect_pg(pg_dsn, "psycopg", autocommit=True) as writer:
        _insert(writer, pg_queue.table, "(processo) VALUES ('p')")
        _insert(
            writer,
            pg_queue.table,
            "(processo, data_hora) VALUES ('p', clock_timestamp() - interval '1 hour')",
        )
    assert collect_until_sentinel(listener, pg_admin, pg_queue.name) == ["", ""]


def test_trigger_says_scheduled_for_future_and_agendada_rows(pg_queue, pg_admin, listener, pg_dsn):
    # Workers must not wake to claim these, only re-plan their next wake-up.
    with connect_pg(pg_dsn, "psycopg", autocommit=True) as writer:
        _insert(
            writer,
            pg_queue.table,
            "(processo, data_hora) VALUES ('p', clock_timestamp() + interval '1 hour')",
        )
        _insert(writer, pg_queue.table, "(processo, status) VALUES ('p', 'agendada')")
    assert collect_until_sentinel(listener, pg_admin, pg_queue.name) == ["scheduled", "scheduled"]


def test_trigger_is_silent_for_settled_and_running_rows(pg_queue, pg_admin, listener, pg_dsn):
    with connect_pg(pg_dsn, "psycopg", autocommit=True) as writer:
        _insert(writer, pg_queue.table, "(processo, status) VALUES ('p', 'sucesso')")
        _insert(writer, pg_queue.table, "(processo, status) VALUES ('p', 'processando')")
        _insert(writer, pg_queue.table, "(processo, status) VALUES ('p', 'falha')")
    assert collect_until_sentinel(listener, pg_admin, pg_queue.name) == []


def test_trigger_notifies_once_per_statement_for_many_rows(pg_queue, pg_admin, listener, pg_dsn):
    # One call per INSERT (or COPY): a bulk insert of ready and future rows sends
    # each payload once, and a statement of settled rows sends nothing.
    with connect_pg(pg_dsn, "psycopg", autocommit=True) as writer:
        _insert(
            writer,
            pg_queue.table,
            "(processo, data_hora) SELECT 'p', clock_timestamp() + g * interval '1 hour' "
            "FROM generate_series(-50, 50) AS g",
        )
        _insert(writer, pg_queue.table, "(processo, status) SELECT 'p', 'sucesso' "
                "FROM generate_series(1, 10)")  # fmt: skip
    assert sorted(collect_until_sentinel(listener, pg_admin, pg_queue.name)) == ["", "scheduled"]


def test_trigger_notification_waits_for_commit(pg_queue, pg_admin, listener, pg_dsn):
    with connect_pg(pg_dsn, "psycopg") as writer:
        writer.execute(f"INSERT INTO {pg_queue.table} (processo) VALUES ('p')")
        assert collect_until_sentinel(listener, pg_admin, pg_queue.name) == []
        writer.rollback()
    assert collect_until_sentinel(listener, pg_admin, pg_queue.name) == []


@pytest.mark.parametrize("path", CLAIM_PATHS)
def test_claims_use_the_partial_claim_index(path, pg_queue, pg_admin, pg_autocommit):
    # 20,000 rows: mostly history, some ready, some scheduled, a few running.
    pg_admin.execute(
        f"""
        INSERT INTO {pg_queue.table} (processo, status, prioridade, data_hora)
        SELECT {busy_row_sql("g")},
               clock_timestamp() - make_interval(secs => g)
        FROM generate_series(1, 20000) AS g
        """
    )
    pg_admin.execute(f"ANALYZE {pg_queue.table}")
    plan = claim_plan(pg_autocommit, pg_queue.table, path)
    shown = json.dumps(plan, indent=1)
    nodes = list(plan_nodes(plan))
    scans_of_queue = [
        n for n in nodes if n.get("Relation Name") == pg_queue.name and "Scan" in n["Node Type"]
    ]
    claim_scans = [n for n in scans_of_queue if n.get("Index Name") == pg_queue.claim_index]
    assert claim_scans, shown
    assert not [n for n in scans_of_queue if n["Node Type"] == "Seq Scan"], shown
    # The index gives the claim order: no sort is needed below the limit.
    limit = next(n for n in nodes if n["Node Type"] == "Limit")
    assert not [n for n in plan_nodes(limit) if n["Node Type"] == "Sort"], shown


def test_wake_up_queries_read_a_few_index_entries_on_a_backlog(pg_queue, pg_admin, pg_autocommit):
    """The dispatcher's next wake-up (after every notification) and the renotify service's
    stale check stay one index entry deep on a fresh backlog of ready rows (no statistics
    yet): clock_timestamp() is volatile, so written inline it cannot bound the index scan
    and the planner read every ready row (58 ms on 50,000)."""
    table = pg_queue.table
    pg_admin.execute(
        f"INSERT INTO {table} (processo, status, data_hora) "
        "SELECT 'p', 'pendente', clock_timestamp() - make_interval(secs => g / 1000.0) "
        "FROM generate_series(1, 5000) AS g"
    )
    pg_admin.execute(
        f"INSERT INTO {table} (processo, status, data_hora) VALUES "
        "('p', 'pendente', clock_timestamp() + interval '60 s'), "
        "('p', 'agendada', clock_timestamp() + interval '90 s')"
    )
    sql = PostgresQueueStore(table).sql
    queries = [
        (sql["next_due"], {}),
        (sql["count_stale_pending"], {"wait_seconds": 3600}),  # none stale: the worst case
    ]
    for query, params in queries:
        [[plan]] = pg_autocommit.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + query, params
        ).fetchall()
        if isinstance(plan, str):
            plan = json.loads(plan)
        nodes = list(plan_nodes(plan[0]["Plan"]))
        # The rows each scan of the queue looked at: those it returned and those it dropped.
        read = [
            n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0)
            for n in nodes
            if n.get("Relation Name") == pg_queue.name
        ]
        assert read and max(read) <= 1, json.dumps(plan, indent=1)
    assert 55 < pg_autocommit.execute(sql["next_due"]).fetchone()[0] <= 60


@pytest.mark.parametrize("chave_externa", ["pedido-7", None])
def test_list_equivalent_reads_the_equivalent_index(
    chave_externa, pg_queue, pg_admin, pg_autocommit
):
    """list_equivalent_task's lookup is an index scan of one chave_externa (or of the rows
    without one), not a read of the whole table: written IS NOT DISTINCT FROM, the key
    could not use any index."""
    table = pg_queue.table
    pg_admin.execute(
        f"INSERT INTO {table} (processo, chave_externa, status) "
        "SELECT 'p', CASE WHEN g % 100 = 0 THEN NULL ELSE 'pedido-' || g END, 'sucesso' "
        "FROM generate_series(1, 20000) AS g"
    )
    pg_admin.execute(f"ANALYZE {table}")
    params = {"chave_externa": chave_externa, "payload_hash": None, "statuses": ["sucesso"]}
    query = PostgresQueueStore(table).sql["list_equivalent"]
    [[plan]] = pg_autocommit.execute("EXPLAIN (FORMAT JSON) " + query, params).fetchall()
    if isinstance(plan, str):
        plan = json.loads(plan)
    nodes = list(plan_nodes(plan[0]["Plan"]))
    assert f"idx_{pg_queue.name}_equivalent" in {n.get("Index Name") for n in nodes}, plan
    assert "Seq Scan" not in {n["Node Type"] for n in nodes}, plan
    found = pg_autocommit.execute(query, params).fetchall()
    assert len(found) == (1 if chave_externa else 200)


def test_generated_names_are_dropped_cleanly(pg_dsn, pg_admin, pg_autocommit):
    """The fixture's teardown leaves nothing behind (queue tables and trigger function)."""
    queue = create_queue(pg_admin, pg_dsn)
    drop_queue(pg_admin, queue)
    leftovers = pg_autocommit.execute(
        "SELECT count(*) FROM pg_class WHERE relname LIKE %s", (f"%{queue.name}%",)
    ).fetchone()[0]
    functions = pg_autocommit.execute(
        "SELECT count(*) FROM pg_proc WHERE proname = %s", (f"notify_{queue.name}_insert",)
    ).fetchone()[0]
    assert (leftovers, functions) == (0, 0)


# -- the partitioned layout (db/postgres/layout.py) --------------------------------------


def test_the_partitioned_layout_applies_and_upgrades_only_as_itself(
    pg_partitioned_queue, pg_admin, pg_autocommit
):
    q = pg_partitioned_queue.name
    kind = pg_autocommit.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", (q,))
    assert kind.fetchone()[0] == "p"
    before = queue_catalog(pg_autocommit, "public", q)
    pg_admin.execute(render("public", q, upgrade=True, layout="partitioned"))
    assert queue_catalog(pg_autocommit, "public", q) == before  # idempotent
    with pytest.raises(psycopg.errors.RaiseException, match="--layout partitioned"):
        pg_admin.execute(render("public", q, upgrade=True))
    # The autovacuum settings are the hot partition's (a partitioned table stores no row).
    options = pg_autocommit.execute(
        "SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (f"{q}_hot",)
    ).fetchone()[0]
    assert "autovacuum_vacuum_scale_factor=0" in options


def test_a_plain_queue_refuses_the_partitioned_upgrade(pg_queue, pg_admin):
    with pytest.raises(psycopg.errors.RaiseException, match="is plain"):
        pg_admin.execute(render("public", pg_queue.name, upgrade=True, layout="partitioned"))


def test_the_partitioned_claim_reads_the_hot_partition_only(pg_partitioned_queue, pg_admin):
    """Pinned to finished_day = 1, the claim function's statements are planned on the hot
    partition alone, however many day partitions there are."""
    q = pg_partitioned_queue.name
    plan = claim_plan(pg_admin, pg_partitioned_queue.table, "claim function")
    reads = [
        node
        for node in plan_nodes(plan)
        if node.get("Relation Name") and node["Node Type"] != "ModifyTable"
    ]
    walks = {n["Relation Name"] for n in reads if not n.get("Index Name", "").endswith("_pkey")}
    # The limits table (a few rows: limited and paused processos) is read once per claim
    # statement, as a set (db/postgres/claim_sets.py).
    assert walks - {f"{q}_limits"} == {f"{q}_hot"}, walks
    # No day partition at all: a retry's payload, which its first attempt keeps (on any
    # day), is read by a statement of its own, for retries only (db/postgres/dialect.py).
    assert not [n for n in reads if n["Relation Name"].startswith(f"{q}_p")]
