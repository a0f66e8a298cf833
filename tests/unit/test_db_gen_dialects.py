"""python -m nsj_queue_lib.db_gen --dialect mysql / singlestore: golden files, the rendered
database/ files, the same logical table as PostgreSQL's, refused names (no database needed)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from nsj_queue_lib import Settings, model
from nsj_queue_lib.db.dialect import DIALECT_NAMES
from nsj_queue_lib.db.driver import (
    DRIVER_KEYS,
    client_store,
    driver_capabilities,
    driver_class,
    driver_module_name,
    get_dialect,
    make_driver,
)
from nsj_queue_lib.db.mysql.dialect import (
    UPGRADE_COLUMNS,
    claim_procedure_version,
    column_definitions,
    split_script,
)
from nsj_queue_lib.db.sql_files import load_queries
from nsj_queue_lib.db_gen import render
from tests.helpers.golden import REGENERATE, ROOT, assert_matches_golden, db_gen

DIALECTS = ["mysql", "singlestore"]


@pytest.mark.parametrize(
    "golden, args",
    [
        ("mysql_create.sql", ["public", "fila_teste", "--dialect", "mysql"]),
        ("mysql_upgrade.sql", ["public", "fila_teste", "--dialect", "mysql", "--upgrade"]),
        ("mysql8_create.sql", ["public", "fila_teste", "--dialect", "mysql", "--server", "mysql"]),
        (
            "mysql8_upgrade.sql",
            ["public", "fila_teste", "--dialect", "mysql", "--server", "mysql", "--upgrade"],
        ),
        ("singlestore_create.sql", ["public", "fila_teste", "--dialect", "singlestore"]),
    ],
)
def test_output_matches_golden_file(golden, args):
    assert_matches_golden(golden, args)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_database_fila_teste_sql_is_current(dialect):
    result = db_gen("public", "fila_teste", "--dialect", dialect)
    assert result.returncode == 0, result.stderr
    current = (ROOT / "database" / dialect / "fila_teste.sql").read_text("utf-8")
    assert current == result.stdout, (
        f"database/{dialect}/fila_teste.sql is stale: run {REGENERATE} (or make ddl)"
    )


def test_make_verify_ddl_checks_every_dialect():
    result = subprocess.run(
        [
            "bash",
            "scripts/ddl.sh",
            "check",
            "public",
            "fila_teste",
            "postgres",
            "mysql",
            "singlestore",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ok ") == 3


@pytest.mark.parametrize("dialect", DIALECTS)
def test_render_is_what_the_command_prints(dialect):
    assert (
        render("public", "fila_teste", dialect)
        == db_gen("public", "fila_teste", "--dialect", dialect).stdout
    )


@pytest.mark.parametrize("dialect", DIALECTS)
def test_names_are_substituted_everywhere(dialect):
    ddl = render("sch", "minha_fila", dialect)
    assert "fila_teste" not in ddl
    assert not re.search(r"\{[a-z_]+\}", ddl), "unrendered placeholder"
    assert re.search(r"CREATE (ROWSTORE )?TABLE sch\.minha_fila \(", ddl)
    assert re.search(r"CREATE (ROWSTORE )?TABLE sch\.minha_fila_subscriber \(", ddl)
    assert "idx_minha_fila_claim" in ddl and "idx_minha_fila_subscriber_processo" in ddl


def _table_body(ddl: str, table: str) -> str:
    match = re.search(
        rf"CREATE (?:ROWSTORE )?TABLE (?:IF NOT EXISTS )?{re.escape(table)} \((.*?)\n\)", ddl, re.S
    )
    assert match, f"no CREATE TABLE {table}"
    return match.group(1)


def _columns(ddl: str, table: str) -> dict[str, str]:
    return dict(re.findall(r"^\s+([a-z_]+) (.+?),?$", _table_body(ddl, table), re.M))


@pytest.mark.parametrize("dialect", ["postgres", *DIALECTS])
def test_every_dialect_renders_the_same_logical_table(dialect):
    ddl = render("public", "fila_teste", dialect)
    queue = _columns(ddl, "public.fila_teste")
    # MySQL's unique indexes of unfinished dedupe keys and running lock keys, and its
    # key index's status of keyed rows only, need generated columns.
    generated = (
        ["dedupe_active", "lock_key_running", "lock_key_status", "fair_key_status"]
        if dialect == "mysql"
        else []
    )
    assert list(queue) == [*model.QUEUE_COLUMNS, *model.EXTRA_COLUMNS, *generated]
    subscriber = _columns(ddl, "public.fila_teste_subscriber")
    # SingleStore has no circuit breakers (nor a limits table): no breaker columns.
    breaker = () if dialect == "singlestore" else model.SUBSCRIBER_BREAKER_COLUMNS
    assert list(subscriber) == [*model.SUBSCRIBER_COLUMNS, *breaker]
    # The same defaults and sizes everywhere.
    assert "DEFAULT 'pendente'" in queue["status"] and queue["status"].startswith("varchar(100)")
    assert "DEFAULT 1" in queue["tentativa"]
    assert "DEFAULT 50" in queue["prioridade"]
    for column in ("pub_sub", "dead"):
        assert re.search(r"(?i)not null", queue[column]) and re.search(
            r"(?i)default false", queue[column]
        ), column
    for column in ("reenfileirado", "estouro_tentativas"):
        assert re.search(r"(?i)default false", queue[column]), column
    for column, size in model.TEXT_LIMITS.items():
        assert queue[column] == f"varchar({size})", column
    assert queue["mensagem"] == queue["mensagem_anterior"] == f"varchar({model.MENSAGEM_LIMIT})"
    for column in ("data_hora", "data_hora_inicial"):
        assert re.search(
            r"(?i)default (clock_timestamp\(\)|current_timestamp\(6\))", queue[column]
        ), column
    assert re.search(r"(?i)not null", subscriber["processo"]) and re.search(
        r"(?i)default true", subscriber["ativo"]
    )


@pytest.mark.parametrize("dialect", DIALECTS)
def test_times_keep_microseconds(dialect):
    queue = _columns(render("public", "fila_teste", dialect), "public.fila_teste")
    for column in ("data_hora_inicial", "data_hora", "proxima_tentativa", "data_hora_anterior"):
        assert re.match(r"(timestamp|datetime)\(6\)", queue[column]), column


def test_mysql_times_are_timestamps_and_nullable_without_auto_update():
    queue = _columns(render("public", "fila_teste", "mysql"), "public.fila_teste")
    for column in ("data_hora_inicial", "data_hora", "proxima_tentativa", "data_hora_anterior"):
        # An explicit NULL: with explicit_defaults_for_timestamp off, a bare TIMESTAMP
        # would become NOT NULL ... ON UPDATE CURRENT_TIMESTAMP.
        assert queue[column].startswith("timestamp(6) NULL DEFAULT"), column
        assert "ON UPDATE" not in queue[column]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_no_trigger_and_no_postgresql(dialect):
    ddl = render("public", "fila_teste", dialect).lower()
    for word in (
        "trigger",
        "pg_notify",
        "plpgsql",
        "clock_timestamp",
        "bytea",
        "bigserial",
        "with time zone",
    ):
        assert word not in re.sub(r"--.*$", "", ddl, flags=re.M), word


def test_mysql_claim_index_follows_the_claim_order():
    ddl = render("public", "fila_teste", "mysql")
    assert (
        "CREATE INDEX idx_fila_teste_claim ON public.fila_teste (status, prioridade DESC, data_hora, id);"
        in ddl
    )
    assert "CREATE INDEX idx_fila_teste_due ON public.fila_teste (status, data_hora);" in ddl
    assert "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin" in ddl


def test_singlestore_is_a_sharded_rowstore():
    ddl = render("public", "fila_teste", "singlestore")
    assert ddl.count("CREATE ROWSTORE TABLE") == 4  # queue, subscriber, workers, periodic
    assert "SHARD KEY (id)" in ddl
    assert "KEY idx_fila_teste_claim (status, prioridade DESC, data_hora, id)" in ddl
    assert "AUTO_INCREMENT" in ddl and "bigint NOT NULL AUTO_INCREMENT" in ddl


def test_mysql_upgrade_statements_are_all_idempotent_forms():
    ddl = render("public", "fila_teste", "mysql", upgrade=True)
    code = re.sub(r"--.*$", "", ddl, flags=re.M)
    statements = split_script(ddl)
    idempotent = re.compile(
        r"^(SET @nsjq_ddl = IF\(\(SELECT count\(\*\) FROM information_schema\.(columns|statistics|PARTITIONS) WHERE "
        r"|PREPARE nsjq_step FROM @nsjq_ddl$|EXECUTE nsjq_step$|DEALLOCATE PREPARE nsjq_step$"
        # The MariaDB script's first statement: on MySQL it stops the script (changes nothing).
        r"|SET @nsjq_ddl = IF\(VERSION\(\) LIKE '%MariaDB%', 'DO 0', "
        # The session's time zone, UTC around paused_until's change (and given back).
        r"|SET @nsjq_time_zone = @@session\.time_zone$|SET time_zone = ('\+00:00'|@nsjq_time_zone)$"
        r"|CREATE TABLE IF NOT EXISTS "
        r"|DROP PROCEDURE IF EXISTS public.claim_(next|limited)_fila_teste(_v2)?$"
        r"|DROP PROCEDURE IF EXISTS public.release_fila_teste$)"
    )
    assert len(statements) >= 40
    # The claim procedure, the previous release's (a call of this one's) and the limited
    # claim are replaced: each created once, right after its DROP ... IF EXISTS.
    creates = [
        i for i, statement in enumerate(statements) if statement.startswith("CREATE PROCEDURE")
    ]
    assert [statements[i - 1] for i in creates] == [
        "DROP PROCEDURE IF EXISTS public.release_fila_teste",
        "DROP PROCEDURE IF EXISTS public.claim_next_fila_teste_v2",
        "DROP PROCEDURE IF EXISTS public.claim_next_fila_teste",
        "DROP PROCEDURE IF EXISTS public.claim_limited_fila_teste_v2",
    ]
    for i, statement in enumerate(statements):
        assert i in creates or idempotent.match(statement), statement
    # MySQL 8 has neither of these: the script must not depend on them.
    assert "ADD COLUMN IF NOT EXISTS" not in code and "CREATE INDEX IF NOT EXISTS" not in code
    for column in UPGRADE_COLUMNS:
        assert (
            f"column_name = '{column}') = 0, 'ALTER TABLE public.fila_teste ADD COLUMN {column} "
            in ddl
        )
    created = column_definitions(render("public", "fila_teste", "mysql"), "public.fila_teste")
    assert f"ADD COLUMN dead {created['dead']}'" in ddl  # definitions come from the create DDL


def test_split_script_honours_delimiter_lines():
    script = (
        "-- a comment; with a semicolon\n"
        "CREATE TABLE a (id int);\nCREATE INDEX i ON a (id);\n"
        "DELIMITER //\nCREATE PROCEDURE p()\nBEGIN\n    -- inside; too\n    SELECT 1;\n    SELECT 2;\nEND//\n"
        "DELIMITER ;\nDROP TABLE b;\n"
    )
    assert split_script(script) == [
        "CREATE TABLE a (id int)",
        "CREATE INDEX i ON a (id)",
        "CREATE PROCEDURE p()\nBEGIN\n    SELECT 1;\n    SELECT 2;\nEND",
        "DROP TABLE b",
    ]


def _leading_arguments(text: str, count: int) -> list[str]:
    """The first ``count`` comma-separated arguments of ``text`` (nested parentheses kept)."""
    arguments, depth, start = [], 0, 0
    for position, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if (char == "," and depth == 0) or depth < 0:
            arguments.append(text[start:position].strip())
            start = position + 1
            if len(arguments) == count or depth < 0:
                break
    return arguments


def test_mysql_create_ddl_has_the_claim_procedure_of_this_version():
    statements = split_script(render("public", "fila_teste", "mysql"))
    [procedure] = [s for s in statements if s.startswith("CREATE PROCEDURE public.claim_next")]
    assert procedure.startswith(
        "CREATE PROCEDURE public.claim_next_fila_teste_v2(\n    IN p_task_id BIGINT,"
    )
    # The message keeps every character whatever the database's default character set.
    assert "IN p_mensagem VARCHAR(500) CHARACTER SET utf8mb4," in procedure
    assert f"COMMENT '{claim_procedure_version()}'" in procedure
    assert "FOR UPDATE SKIP LOCKED" in procedure and "SQL SECURITY INVOKER" in procedure
    # Every column of the row the store decodes, after the liveness lock's result (and nothing else);
    # the claimed row's status is the one the claim writes.
    json_object = procedure.split("JSON_OBJECT(")[1].split(")\n")[0]
    keys = re.findall(r"(?:^|, )'([a-z_]+)', (?:t\.|HEX\(|GET_LOCK\(|'processando')", json_object)
    assert keys == ["liveness_locked", *model.CLAIMED_COLUMNS]
    assert "'status', 'processando'" in json_object
    # The positioned claim and the claim from the start.
    assert procedure.count("JSON_OBJECT(") == 2
    # The set-based batch's rows, decoded by position (rows.claims_from_task_values): the
    # value of every column in CLAIMED_COLUMNS order, then the liveness lock's result. As its
    # locking read builds them (every lock taken: 1, status the one its UPDATE writes, the
    # row's own payload), or read again: a static statement (ids close together), or one
    # built as text (the IN list).
    as_read_row, static_row, built_row = procedure.split("JSON_ARRAY(t.id, ")[1:]
    as_read = ["t.id", *_leading_arguments(as_read_row, len(model.CLAIMED_COLUMNS))]
    assert as_read[-1] == "1"
    assert as_read[model.CLAIMED_COLUMNS.index("status")] == "'processando'"
    assert as_read[model.CLAIMED_COLUMNS.index("payload")] == "t.payload"
    for column, value in zip(model.CLAIMED_COLUMNS, as_read, strict=False):
        assert column == "status" or re.search(rf"\bt\.{column}\b", value), (column, value)
    values = ["t.id", *_leading_arguments(static_row, len(model.CLAIMED_COLUMNS))]
    assert values[-1].startswith("IF(v_locked = v_count, 1,")
    built = ["t.id", *_leading_arguments(built_row, len(model.CLAIMED_COLUMNS) - 1)]
    assert built_row.split(f"{built[-1]}, ", 1)[1].startswith("',\n")
    assert "IF(v_locked = v_count, '1'," in built_row
    for row_values in (values, built):
        for column, value in zip(model.CLAIMED_COLUMNS, row_values, strict=False):
            assert re.search(rf"\bt\.{column}\b", value), (column, value)
        assert len(row_values) >= len(model.CLAIMED_COLUMNS)
    assert "DROP PROCEDURE" not in render("public", "fila_teste", "mysql")


def test_singlestore_upgrade_exits_2_with_a_clear_message():
    result = db_gen("public", "fila_teste", "--dialect", "singlestore", "--upgrade")
    assert result.returncode == 2
    assert result.stdout == ""
    assert (
        "db_gen:" in result.stderr and "--upgrade is not supported for singlestore" in result.stderr
    )


MALICIOUS = [
    ("public", "x;drop table y"),
    ("public", "a b"),
    ("public", "`q`"),
    ("public", '"q"'),
    ("public", "q'"),
    ("public", "1abc"),
    ("public", ""),
    ("public", "q" * 60),
    ("public", "fila\n"),
    ("public", "fila-teste"),
    ("public", "fila#x"),
    ("public", "fila/*x"),
    ("public", "açaí"),
    ("public", "s.t"),
    ("x;drop table y", "fila"),
    ("`db`", "fila"),
    ("", "fila"),
]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("upgrade", [False, True], ids=["create", "upgrade"])
@pytest.mark.parametrize("schema, queue", MALICIOUS)
def test_refused_names_exit_2_with_nothing_on_stdout(schema, queue, upgrade, dialect):
    result = db_gen(schema, queue, "--dialect", dialect, *(["--upgrade"] if upgrade else []))
    assert result.returncode == 2
    assert result.stdout == ""
    assert "db_gen" in result.stderr


def test_registry_knows_the_dialects_and_drivers():
    assert set(DIALECT_NAMES) == {"postgres", "mysql", "singlestore"}
    assert get_dialect("MYSQL").name == "mysql"
    assert get_dialect("SINGLE_STORE").name == "singlestore"
    with pytest.raises(ValueError):
        get_dialect("oracle")


def test_the_driver_table_says_what_each_db_driver_offers_without_loading_a_driver():
    assert DRIVER_KEYS == ("POSTGRES", "MYSQL", "SINGLE_STORE")
    assert {driver_module_name(key) for key in DRIVER_KEYS} == set(DIALECT_NAMES)
    postgres, mysql = driver_capabilities("postgres"), driver_capabilities("MySQL")
    assert (postgres.group_commit_by_default, postgres.max_batch_size, postgres.default_port) == (
        True,
        50,
        5432,
    )
    assert (mysql.group_commit_by_default, mysql.max_batch_size, mysql.default_port) == (
        False,
        None,
        3306,
    )
    assert driver_capabilities("SINGLE_STORE").default_port == 3306
    with pytest.raises(ValueError, match="known: POSTGRES, MYSQL, SINGLE_STORE"):
        driver_capabilities("oracle")
    for key in DRIVER_KEYS:  # each driver's capabilities are the table's
        assert driver_class(key).capabilities is driver_capabilities(key)


def _driver(db_driver: str):
    return make_driver(
        Settings(
            db_host="h", db_name="d", db_user="u", queue_name="q", queue_table="q"
        ).with_changes(db_driver=db_driver)
    )


def test_each_driver_says_what_its_database_offers():
    drivers = {name: _driver(name) for name in ("POSTGRES", "MYSQL", "SINGLE_STORE")}
    assert {name: d.name for name, d in drivers.items()} == {
        "POSTGRES": "postgres",
        "MYSQL": "mysql",
        "SINGLE_STORE": "singlestore",
    }
    offers = {
        name: (
            d.capabilities.listen_notify,
            d.capabilities.skip_locked,
            d.capabilities.session_locks,
            d.capabilities.asynchronous_commit,
        )
        for name, d in drivers.items()
    }
    assert offers == {
        "POSTGRES": (True, True, True, True),
        "MYSQL": (False, True, True, False),
        "SINGLE_STORE": (False, False, False, False),
    }
    with pytest.raises(ValueError, match="DB_DRIVER"):  # settings refuse it before any driver
        _driver("ORACLE")


def test_a_pymysql_connection_gets_a_mysql_store():
    import pymysql

    from nsj_queue_lib.db.mysql.store import MysqlQueueStore

    conn = pymysql.connections.Connection.__new__(pymysql.connections.Connection)  # never connected
    store = client_store(conn, "public.q", "public.q_subscriber")
    assert type(store) is MysqlQueueStore
    assert (store.queue_table, store.subscriber_table) == ("public.q", "public.q_subscriber")
    with pytest.raises(TypeError, match="unsupported connection type"):
        client_store(object(), "public.q", None)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_queries_are_fully_rendered(dialect):
    store = _driver({"mysql": "MYSQL", "singlestore": "SINGLE_STORE"}[dialect]).new_store(
        "public.q", "public.q_subscriber"
    )
    assert set(store.sql) == set(load_queries(dialect))
    assert set(load_queries(dialect)) == set(load_queries("mysql"))
    for name, steps in store.sql.items():
        for step, sql in steps.items():
            assert sql.strip(), (name, step)
            assert not sql.rstrip().endswith(";"), (name, step)
            assert not re.search(r"\{[a-z_]+\}", sql), (
                f"{name}/{step} has an unrendered placeholder"
            )


def test_singlestore_queries_use_nothing_singlestore_lacks():
    text = (ROOT / "nsj_queue_lib" / "db" / "singlestore" / "queries.sql").read_text("utf-8")
    code = re.sub(r"--.*$", "", text, flags=re.M).upper()
    for missing in (
        "SKIP LOCKED",
        "GET_LOCK",
        "RELEASE_LOCK",
        "IS_USED_LOCK",
        "RETURNING",
        "AND CHAIN",
        "FOR UPDATE",
    ):
        assert missing not in code, missing
