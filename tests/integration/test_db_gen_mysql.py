"""The generated MySQL DDL on a real MariaDB: it applies, has the contract's defaults,
upgrades idempotently, and serves the workers' scans from its indexes (EXPLAIN)."""

from __future__ import annotations

import contextlib
import datetime
import json
import re

import pymysql
import pytest

from nsj_queue_lib import QueueClient, model
from nsj_queue_lib.db.dialect import CLAIM_ROUTINE_RELEASE
from nsj_queue_lib.db.mysql.dialect import claim_procedure_version
from nsj_queue_lib.db.mysql.driver import configure_session
from nsj_queue_lib.db.mysql.store import MysqlQueueStore
from nsj_queue_lib.db_gen import render
from nsj_queue_lib.exceptions import ClaimRoutineError
from tests.helpers.databases import busy_row_sql, fixture_days_ahead, unique_queue_name
from tests.helpers.mysql_queue import (
    ADMIN_INIT,
    connect,
    create_queue,
    drop_queue_tables,
    execute_script,
    fetch_dicts,
    fetch_value,
    row_of,
)

pytestmark = pytest.mark.mysql


def catalog(conn, database: str, name: str) -> dict:
    """Columns (type, default, nullability, order), indexes and table options, the queue name as {q}."""

    def anon(value):
        return value.replace(name, "{q}") if isinstance(value, str) else value

    result = {}
    for table in (name, f"{name}_subscriber"):
        key = anon(table)
        result[key] = {
            "columns": [
                (r["COLUMN_NAME"], r["COLUMN_TYPE"], anon(r["COLUMN_DEFAULT"]), r["IS_NULLABLE"])
                for r in fetch_dicts(
                    conn,
                    "SELECT column_name AS COLUMN_NAME, column_type AS COLUMN_TYPE, "
                    "column_default AS COLUMN_DEFAULT, is_nullable AS IS_NULLABLE "
                    "FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                    "ORDER BY ordinal_position",
                    (database, table),
                )
            ],
            "indexes": indexes(conn, database, table, anon),
            "options": [
                (r["ENGINE"], r["TABLE_COLLATION"])
                for r in fetch_dicts(
                    conn,
                    "SELECT engine AS ENGINE, table_collation AS TABLE_COLLATION FROM information_schema.tables "
                    "WHERE table_schema = %s AND table_name = %s",
                    (database, table),
                )
            ],
        }
    return result


def indexes(
    conn, database: str, table: str, anon=lambda v: v
) -> dict[str, list[tuple[str, str | None]]]:
    found: dict[str, list[tuple[str, str | None]]] = {}
    for r in fetch_dicts(
        conn,
        "SELECT index_name AS INDEX_NAME, column_name AS COLUMN_NAME, collation AS COLLATION "
        "FROM information_schema.statistics WHERE table_schema = %s AND table_name = %s "
        "ORDER BY index_name, seq_in_index",
        (database, table),
    ):
        found.setdefault(anon(r["INDEX_NAME"]), []).append((r["COLUMN_NAME"], r["COLLATION"]))
    return found


def test_generated_ddl_creates_every_object(mysql_queue, mysql_admin):
    snapshot = catalog(mysql_admin, mysql_queue.database, mysql_queue.name)
    queue = snapshot["{q}"]
    assert [c[0] for c in queue["columns"]] == [
        *model.QUEUE_COLUMNS,
        *model.EXTRA_COLUMNS,
        "dedupe_active",
        "lock_key_running",
        "lock_key_status",
        "fair_key_status",
    ]
    types = {c[0]: c[1] for c in queue["columns"]}
    assert types["data_hora"] == types["data_hora_inicial"] == "timestamp(6)"
    assert types["proxima_tentativa"] == types["data_hora_anterior"] == "timestamp(6)"
    assert (types["id"], types["payload"], types["payload_hash"]) == (
        "bigint(20)",
        "longtext",
        "varbinary(64)",
    )
    assert queue["options"] == [("InnoDB", "utf8mb4_bin")]
    assert set(queue["indexes"]) == {
        "PRIMARY",
        "idx_{q}_claim",
        "idx_{q}_due",
        "idx_{q}_data_hora",
        "idx_{q}_dedupe",
        "idx_{q}_lock_key",
        "idx_{q}_lock_key_running",
        "idx_{q}_processo",
        "idx_{q}_chain",
        "idx_{q}_equivalent",
        "idx_{q}_fair_key",
    }
    claim = queue["indexes"]["idx_{q}_claim"]
    assert [c[0] for c in claim] == ["status", "prioridade", "data_hora", "id"]
    assert claim[1][1] == "D"  # prioridade DESC: the claim reads the index in claim order
    assert [c[0] for c in queue["indexes"]["idx_{q}_due"]] == ["status", "data_hora"]
    subscriber = snapshot["{q}_subscriber"]
    assert [c[0] for c in subscriber["columns"]] == [
        *model.SUBSCRIBER_COLUMNS,
        *model.SUBSCRIBER_BREAKER_COLUMNS,
    ]
    assert set(subscriber["indexes"]) == {"PRIMARY", "idx_{q}_subscriber_processo"}
    assert subscriber["options"] == [("InnoDB", "utf8mb4_bin")]
    assert (
        fetch_value(
            mysql_admin,
            "SELECT count(*) FROM information_schema.triggers WHERE event_object_table = %s",
            (mysql_queue.name,),
        )
        == 0
    )


def test_a_bare_insert_gets_the_contract_defaults(mysql_queue, mysql_admin):
    with mysql_admin.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SELECT UTC_TIMESTAMP(6)")
        before = cur.fetchone()[0]
        cur.execute(f"INSERT INTO {mysql_queue.table} (processo) VALUES ('p')")
        task_id = cur.lastrowid
        cur.execute("SELECT UTC_TIMESTAMP(6)")
        after = cur.fetchone()[0]
    row = row_of(mysql_admin, mysql_queue.table, task_id)
    assert (row["status"], row["tentativa"], row["prioridade"]) == ("pendente", 1, 50)
    assert (row["pub_sub"], row["dead"], row["reenfileirado"], row["estouro_tentativas"]) == (
        0,
        0,
        0,
        0,
    )
    assert before <= row["data_hora"] <= after
    assert row["data_hora_inicial"] == row["data_hora"]
    assert row["proxima_tentativa"] is None and row["data_hora_anterior"] is None
    with mysql_admin.cursor() as cur:
        cur.execute(
            f"INSERT INTO {mysql_queue.subscriber_table} (id, processo, headers) VALUES ('s', 'p', '{{}}')"
        )
    sub = row_of(mysql_admin, mysql_queue.subscriber_table, "s")
    assert sub["ativo"] == 1 and before <= sub["created_at"]


def test_upgrade_on_a_current_queue_changes_nothing(mysql_queue, mysql_admin):
    before = catalog(mysql_admin, mysql_queue.database, mysql_queue.name)
    for _ in range(2):
        execute_script(
            mysql_admin, render(mysql_queue.database, mysql_queue.name, "mysql", upgrade=True)
        )
    assert catalog(mysql_admin, mysql_queue.database, mysql_queue.name) == before


# A queue table as an application made it for nsj-queue-lib 1.2.2 on MySQL (the
# specification's columns before prioridade, dead, live_id and pub/sub; 1.2.2's
# db_gen printed PostgreSQL only), with its own index and no subscriber table.
OLD_TABLE = """
CREATE TABLE {table} (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    id_inicial bigint,
    data_hora_inicial datetime DEFAULT CURRENT_TIMESTAMP,
    data_hora datetime DEFAULT CURRENT_TIMESTAMP,
    origem varchar(150),
    destino varchar(150),
    processo varchar(250),
    chave_externa varchar(100),
    proxima_tentativa datetime,
    tentativa int DEFAULT 1,
    status varchar(100) DEFAULT 'pendente',
    reenfileirado boolean DEFAULT false,
    estouro_tentativas boolean DEFAULT false,
    mensagem varchar(500),
    id_anterior bigint,
    data_hora_anterior datetime,
    status_anterior varchar(100),
    mensagem_anterior varchar(500),
    payload text,
    tenant bigint,
    grupo_empresarial varchar(40),
    payload_hash varbinary(64),
    KEY idx_{name}_status (status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""


@pytest.fixture
def old_queue(mysql_kwargs, mysql_admin):
    name = unique_queue_name("old_")
    database = mysql_kwargs["database"]
    with mysql_admin.cursor() as cur:
        cur.execute(OLD_TABLE.format(table=f"{database}.{name}", name=name))
        # A task enqueued the 1.2.2 way: explicit columns, the hash as hex text.
        cur.execute(
            f"INSERT INTO {database}.{name} (origem, destino, processo, chave_externa, payload, payload_hash, "
            "data_hora) VALUES ('erp', 'fiscal', 'p', 'k', 'velho', "
            "'1c7fb6b89e3e9bb0c2ac4ff0e5ca2fc0cb2adf8b1f7e0be2d6e5d0b6fd0fd1f1', NOW() - INTERVAL 1 MINUTE)"
        )
    try:
        yield database, name
    finally:
        drop_queue_tables(mysql_admin, database, name)


def test_upgrade_brings_an_old_table_to_the_current_schema(old_queue, mysql_admin, mysql_kwargs):
    database, name = old_queue
    table = f"{database}.{name}"
    script = render(database, name, "mysql", upgrade=True)
    execute_script(mysql_admin, script)
    columns = [
        r["c"]
        for r in fetch_dicts(
            mysql_admin,
            "SELECT column_name AS c FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s ORDER BY ordinal_position",
            (database, name),
        )
    ]
    assert set(columns) == {
        *model.QUEUE_COLUMNS,
        *model.EXTRA_COLUMNS,
        "dedupe_active",
        "lock_key_running",
        "lock_key_status",
        "fair_key_status",
    }
    old_row = fetch_dicts(mysql_admin, f"SELECT * FROM {table}")[0]
    assert (old_row["prioridade"], old_row["dead"], old_row["pub_sub"], old_row["live_id"]) == (
        50,
        0,
        0,
        None,
    )
    found = indexes(mysql_admin, database, name)
    assert {
        f"idx_{name}_claim",
        f"idx_{name}_due",
        f"idx_{name}_equivalent",
        f"idx_{name}_fair_key",
        f"idx_{name}_status",
    } <= set(found)
    assert indexes(mysql_admin, database, f"{name}_subscriber")
    assert (
        procedure_comment(mysql_admin, database, f"claim_next_{name}_v{CLAIM_ROUTINE_RELEASE}")
        == claim_procedure_version()
    )
    snapshot = catalog(mysql_admin, database, name)
    execute_script(mysql_admin, script)  # idempotent
    assert catalog(mysql_admin, database, name) == snapshot

    # The old task is claimed and completed by this library's store; new tasks go in too.
    store = MysqlQueueStore(table, f"{table}_subscriber")
    worker = connect(mysql_kwargs, autocommit=True)
    try:
        configure_session(worker, executor=True)
        store.bind(worker)  # the table and its claim procedure are this version's
        claimed = store.claim(worker)
        assert claimed is not None
        task = claimed.task
        assert (task.payload, task.row["prioridade"], task.dead) == ("velho", 50, False)
        store.complete_and_claim(worker, task.id, "ok", claim_next=False)
        client_conn = connect(mysql_kwargs)
        try:
            new_id = QueueClient(client_conn, table).insert_task(
                "erp", "fiscal", "p", "k2", {"novo": True}
            )
            client_conn.commit()
        finally:
            client_conn.close()
        claimed = store.claim(worker)
        assert claimed is not None and claimed.task.id == new_id
        store.rollback(worker)
    finally:
        worker.close()
    assert row_of(mysql_admin, table, task.id)["status"] == "sucesso"


def procedure_comment(conn, database: str, name: str) -> str | None:
    rows = fetch_dicts(
        conn,
        "SELECT routine_comment AS c FROM information_schema.routines "
        "WHERE routine_schema = %s AND routine_name = %s",
        (database, name),
    )
    return rows[0]["c"] if rows else None


def test_upgrade_replaces_a_claim_procedure_of_another_version(
    mysql_queue, mysql_admin, mysql_kwargs
):
    name = f"claim_next_{mysql_queue.name}_v{CLAIM_ROUTINE_RELEASE}"
    with mysql_admin.cursor() as cur:
        cur.execute(
            f"ALTER PROCEDURE {mysql_queue.database}.{name} COMMENT 'nsj_queue_lib claim 0000000000000000'"
        )
    store = MysqlQueueStore(mysql_queue.table)
    worker = connect(mysql_kwargs, autocommit=True)
    try:
        with pytest.raises(ClaimRoutineError, match="another version") as info:
            store.bind(worker)
        assert "0000000000000000" in str(info.value) and "--upgrade" in str(info.value)
        execute_script(
            mysql_admin, render(mysql_queue.database, mysql_queue.name, "mysql", upgrade=True)
        )
        assert (
            procedure_comment(mysql_admin, mysql_queue.database, name) == claim_procedure_version()
        )
        assert MysqlQueueStore(mysql_queue.table).bind(worker) == store.bind(worker)
    finally:
        worker.close()


def test_ddl_works_in_another_database(mysql_admin):
    database = unique_queue_name("nsjq_s_")
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
    try:
        queue = create_queue(mysql_admin, database)
        assert "idx_{q}_claim" in catalog(mysql_admin, database, queue.name)["{q}"]["indexes"]
    finally:
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP DATABASE {database}")


def test_applying_create_twice_fails_loudly(mysql_queue, mysql_admin):
    with pytest.raises(pymysql.err.OperationalError) as info:
        execute_script(mysql_admin, render(mysql_queue.database, mysql_queue.name, "mysql"))
    assert info.value.args[0] == 1050  # table already exists: nothing else was run


# -- the workers' scans use the indexes ---------------------------------------------


@contextlib.contextmanager
def module_queue(mysql_kwargs, **create):
    """A queue for a module's tests that only read its plans (EXPLAIN), on a connection of
    its own: made once per xdist worker, not once per test (the busy queue's 20,000 rows
    and ANALYZE took 2-3 s a test under make test)."""
    admin = connect(mysql_kwargs, autocommit=True, init_command=ADMIN_INIT)
    try:
        queue = create_queue(admin, mysql_kwargs["database"], **create)
        try:
            yield queue
        finally:
            drop_queue_tables(admin, queue.database, queue.name)
    finally:
        admin.close()


@pytest.fixture(scope="module")
def busy_queue(mysql_kwargs):
    """20,000 rows: mostly history, some ready, some scheduled, a few running. Shared: its
    tests only EXPLAIN."""
    with (
        module_queue(mysql_kwargs) as queue,
        connect(mysql_kwargs, autocommit=True, init_command=ADMIN_INIT) as admin,
    ):
        with admin.cursor() as cur:
            cur.execute(
                f"""
                INSERT INTO {queue.table} (processo, status, prioridade, data_hora, data_hora_inicial)
                SELECT {busy_row_sql("seq")},
                       NOW(6) - INTERVAL seq SECOND,
                       NOW(6) - INTERVAL seq SECOND
                FROM seq_1_to_20000
                """
            )
            cur.execute(f"ANALYZE TABLE {queue.table}")
            cur.fetchall()
        yield queue


def explain(conn, sql: str, params) -> dict:
    with conn.cursor() as cur:
        cur.execute("EXPLAIN FORMAT=JSON " + sql, params)
        return json.loads(cur.fetchone()[0])


def tables_in(plan) -> list[dict]:
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "table_name" in node:
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(plan)
    return found


@pytest.mark.parametrize(
    "query, step, params, index",
    [
        (
            "claim_tasks",
            "select",
            {"limit": 10, "handled_subscribers": None, "handled_processos": None},
            "claim",
        ),
        ("promote_due", "select", {"limit": 10}, "due"),
        (
            "find_orphans",
            "candidates",
            {"limit": 100, "check_db_locks": True, "lock_prefix": "nsjq:x:"},
            "due",
        ),
        ("count_stale_pending", "sql", {"wait_us": 1_000_000}, "due"),
        ("purge", "select", {"limit": 100, "max_age_days": 0}, "data_hora"),
        (
            "list_equivalent",
            "sql",
            {"chave_externa": "k", "payload_hash": b"h", "statuses": ("pendente", "falha")},
            "equivalent",
        ),
    ],
)
def test_worker_scans_read_their_index_without_sorting(
    busy_queue, mysql_admin, query, step, params, index
):
    store = MysqlQueueStore(busy_queue.table)
    plan = explain(mysql_admin, store.sql[query][step], params)
    text = json.dumps(plan)
    scans = [t for t in tables_in(plan) if t["table_name"] in (busy_queue.name, "o", "t")]
    assert scans, text
    assert scans[0].get("key") == f"idx_{busy_queue.name}_{index}", text
    assert not [
        t
        for t in tables_in(plan)
        if t.get("access_type") == "ALL" and not t["table_name"].startswith("<")
    ], text
    assert "filesort" not in text, text


def test_next_due_reads_one_index_entry_per_status(busy_queue, mysql_admin):
    store = MysqlQueueStore(busy_queue.table)
    text = json.dumps(explain(mysql_admin, store.sql["next_due"]["sql"], None))
    # MIN() on the (status, data_hora) index is answered while planning.
    assert len(re.findall(r"No matching min/max row|Select tables optimized away", text)) == 2, text


def test_a_keyed_claim_probes_index_entries_and_scans_no_range(
    mysql_queue, mysql_admin, mysql_kwargs
):
    """db/mysql/lock_keys.py: MariaDB ran the 'is a task of the key running' probe, written
    NOT EXISTS, as a scan (hundreds of row reads per claim in a drain of 100 keys)."""
    table = mysql_queue.table
    with mysql_admin.cursor() as cur:
        cur.execute(
            f"INSERT INTO {table} (processo, payload, lock_key, data_hora) "
            "SELECT 'p', '{}', CONCAT('k', seq % 100), NOW(6) - INTERVAL 1 SECOND "
            "FROM seq_1_to_1000"
        )
    store = MysqlQueueStore(table)
    worker = connect(mysql_kwargs, autocommit=True)
    try:
        configure_session(worker, executor=True)
        store.bind(worker)
        claimed = store.claim(worker)
        for _ in range(200):  # a drain under way: running and finished tasks of every key
            claimed = store.complete_and_claim(worker, claimed.task.id, "ok", claim_next=True)
        reads = "Handler_read_next", "Handler_read_prev", "Handler_read_rnd_next"
        sql = "SHOW SESSION STATUS WHERE Variable_name IN (%s, %s, %s)"
        before = sum(int(v) for _, v in fetch_rows(worker, sql, reads))
        for _ in range(20):
            claimed = store.complete_and_claim(worker, claimed.task.id, "ok", claim_next=True)
        after = sum(int(v) for _, v in fetch_rows(worker, sql, reads))
        assert claimed is not None
        store.rollback(worker)
    finally:
        worker.close()
    # NOT EXISTS read about 1,000 rows per claim here (the whole table); the scalar probe none.
    assert after - before < 20 * 5, after - before


def fetch_rows(conn, sql: str, args) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


# -- the partitioned layout (db/mysql/layout.py) -----------------------------------------


@pytest.fixture
def partitioned_queue(request, mysql_kwargs, mysql_admin):
    queue = create_queue(
        mysql_admin,
        mysql_kwargs["database"],
        layout="partitioned",
        days=fixture_days_ahead(request),
    )
    try:
        yield queue
    finally:
        drop_queue_tables(mysql_admin, queue.database, queue.name)


def partitions_of(conn, database: str, name: str) -> list[tuple[str, str]]:
    return [
        (r["name"], r["bound"])
        for r in fetch_dicts(
            conn,
            "SELECT PARTITION_NAME AS name, PARTITION_DESCRIPTION AS bound "
            "FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY PARTITION_ORDINAL_POSITION",
            (database, name),
        )
    ]


@pytest.mark.full_days_ahead  # counts them
def test_the_partitioned_layout_applies_and_upgrades_only_as_itself(partitioned_queue, mysql_admin):
    q, database = partitioned_queue.name, partitioned_queue.database
    today = int(fetch_value(mysql_admin, "SELECT UNIX_TIMESTAMP() DIV 86400"))
    found = partitions_of(mysql_admin, database, q)
    # The hot partition, then the weeks (Monday to Sunday) of yesterday to 14 days ahead.
    monday = today - 1 - (datetime.date(1970, 1, 1) + datetime.timedelta(today - 1)).weekday()
    weeks = range(monday, today + 15, 7)
    assert found == [("p_hot", "2")] + [(f"p{week}", str(week + 7)) for week in weeks]
    assert len(weeks) in (3, 4)
    keys = indexes(mysql_admin, database, q)
    assert [c for c, _ in keys["PRIMARY"]] == ["id", "finished_day"]
    assert [c for c, _ in keys[f"idx_{q}_dedupe"]] == ["dedupe_active", "finished_day"]
    before = catalog(mysql_admin, database, q)
    for _ in range(2):
        execute_script(
            mysql_admin, render(database, q, "mysql", upgrade=True, layout="partitioned")
        )
    assert catalog(mysql_admin, database, q) == before  # idempotent
    assert partitions_of(mysql_admin, database, q) == found
    triggers = fetch_value(
        mysql_admin,
        "SELECT count(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = %s "
        "AND EVENT_OBJECT_TABLE = %s AND ACTION_TIMING = 'BEFORE' AND EVENT_MANIPULATION = 'UPDATE'",
        (database, q),
    )
    assert triggers == 1  # built again by each upgrade
    with pytest.raises(
        pymysql.err.OperationalError,
        match="is partitioned: run db_gen --upgrade --layout partitioned",
    ):
        execute_script(mysql_admin, render(database, q, "mysql", upgrade=True))


def test_a_plain_queue_refuses_the_partitioned_upgrade(mysql_queue, mysql_admin):
    script = render(
        mysql_queue.database, mysql_queue.name, "mysql", upgrade=True, layout="partitioned"
    )
    with pytest.raises(pymysql.err.OperationalError, match="is plain: run db_gen --upgrade"):
        execute_script(mysql_admin, script)
    assert partitions_of(mysql_admin, mysql_queue.database, mysql_queue.name) == [(None, None)]


@pytest.fixture(scope="module")
def explained_partitioned_queue(mysql_kwargs):
    """A partitioned queue with db_gen's days ahead, shared: its tests bind a store and
    EXPLAIN."""
    with module_queue(mysql_kwargs, layout="partitioned") as queue:
        yield queue


@pytest.mark.parametrize(
    "query, step, params",
    [
        ("claim_tasks", "select", {"handled_subscribers": None, "handled_processos": None}),
        ("promote_due", "select", {"limit": 10}),
        ("find_orphans", "candidates", {"limit": 10, "check_db_locks": True, "lock_prefix": "x"}),
        ("count_stale_pending", "sql", {"wait_us": 1_000_000}),
        ("fail_final", "sql", {"id": 1, "status": "falha", "mensagem": "m"}),
    ],
)
def test_the_partitioned_stores_statements_read_the_hot_partition_only(
    explained_partitioned_queue, mysql_admin, query, step, params
):
    """Pinned to finished_day = 1, the worker's statements are pruned to p_hot, however
    many day partitions there are."""
    store = MysqlQueueStore(explained_partitioned_queue.table)
    store.bind(mysql_admin)
    plan = explain(mysql_admin, store.sql[query][step], params)
    # The queue table's reads (not the limits table, "lim", nor derived tables).
    read = [t for t in tables_in(plan) if t["table_name"] != "lim" and t["table_name"][0] != "<"]
    assert read and all(t.get("partitions") == ["p_hot"] for t in read), json.dumps(plan)


def test_the_partitioned_claim_procedure_reads_the_hot_partition(
    partitioned_queue, mysql_admin, mysql_kwargs
):
    """The claim procedure's look-up, locking read and completion touch p_hot alone: a drain
    reads no row of a day partition beyond a primary-key probe."""
    table = partitioned_queue.table
    with mysql_admin.cursor() as cur:
        cur.execute(
            f"INSERT INTO {table} (processo, payload, data_hora) "
            "SELECT 'p', '{}', NOW(6) - INTERVAL 1 SECOND FROM seq_1_to_300"
        )
    store = MysqlQueueStore(table)
    worker = connect(mysql_kwargs, autocommit=True)
    try:
        configure_session(worker, executor=True)
        store.bind(worker)
        claimed = store.claim(worker)
        for _ in range(100):  # finished rows in today's partition
            claimed = store.complete_and_claim(worker, claimed.task.id, "ok", claim_next=True)
        reads = "Handler_read_next", "Handler_read_prev", "Handler_read_rnd_next"
        sql = "SHOW SESSION STATUS WHERE Variable_name IN (%s, %s, %s)"
        before = sum(int(v) for _, v in fetch_rows(worker, sql, reads))
        for _ in range(20):
            claimed = store.complete_and_claim(worker, claimed.task.id, "ok", claim_next=True)
        after = sum(int(v) for _, v in fetch_rows(worker, sql, reads))
        store.rollback(worker)
    finally:
        worker.close()
    today = int(fetch_value(mysql_admin, "SELECT UNIX_TIMESTAMP() DIV 86400"))
    week = today - (datetime.date(1970, 1, 1) + datetime.timedelta(today)).weekday()
    assert fetch_value(mysql_admin, f"SELECT count(*) FROM {table} PARTITION (p{week})") == 120
    assert after - before < 20 * 5, after - before
