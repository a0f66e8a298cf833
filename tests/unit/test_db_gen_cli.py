"""python -m nsj_queue_lib.db_gen: golden files, the rendered database/ file, refused names."""

from __future__ import annotations

import re

import pytest

from nsj_queue_lib import model
from nsj_queue_lib.db_gen import check_server_option, render
from tests.helpers.golden import REGENERATE, ROOT, assert_matches_golden, db_gen


@pytest.mark.parametrize(
    "golden, args",
    [
        ("postgres_create.sql", ["public", "fila_teste"]),
        ("postgres_upgrade.sql", ["public", "fila_teste", "--upgrade"]),
        ("postgres_create.sql", ["public", "fila_teste", "--dialect", "postgres"]),
    ],
)
def test_output_matches_golden_file(golden, args):
    assert_matches_golden(golden, args)


def test_database_fila_teste_sql_is_current():
    result = db_gen("public", "fila_teste")
    assert result.returncode == 0, result.stderr
    current = (ROOT / "database" / "postgres" / "fila_teste.sql").read_text("utf-8")
    assert current == result.stdout, f"database/postgres/fila_teste.sql is stale: run {REGENERATE}"


def test_render_is_what_the_command_prints():
    assert render("public", "fila_teste") == db_gen("public", "fila_teste").stdout
    assert (
        render("public", "fila_teste", upgrade=True)
        == db_gen("public", "fila_teste", "--upgrade").stdout
    )


def test_names_are_substituted_everywhere():
    ddl = render("sch", "minha_fila")
    assert "fila_teste" not in ddl
    assert not re.search(r"\{[a-z_]+\}", ddl), "unrendered placeholder"
    assert "CREATE TABLE sch.minha_fila (" in ddl
    assert "CREATE TABLE sch.minha_fila_subscriber (" in ddl
    assert "pg_notify('minha_fila'" in ddl
    assert "idx_minha_fila_claim" in ddl


def _table_body(ddl: str, table: str) -> str:
    match = re.search(
        rf"CREATE TABLE (?:IF NOT EXISTS )?{re.escape(table)} \((.*?)\n\);", ddl, re.S
    )
    assert match, f"no CREATE TABLE {table}"
    return match.group(1)


def test_create_ddl_has_every_contract_column():
    ddl = render("public", "fila_teste")
    queue_columns = re.findall(r"^\s+([a-z_]+) ", _table_body(ddl, "public.fila_teste"), re.M)
    assert queue_columns == [*model.QUEUE_COLUMNS, *model.EXTRA_COLUMNS]
    subscriber_columns = re.findall(
        r"^\s+([a-z_]+) ", _table_body(ddl, "public.fila_teste_subscriber"), re.M
    )
    assert subscriber_columns == [*model.SUBSCRIBER_COLUMNS, *model.SUBSCRIBER_BREAKER_COLUMNS]


def test_upgrade_statements_are_all_idempotent_forms():
    ddl = render("public", "fila_teste", upgrade=True)
    code = re.sub(r"--.*$", "", ddl, flags=re.M)
    code = re.sub(r"\$\$.*?\$\$", "$$body$$", code, flags=re.S)  # function bodies hold ';' too
    statements = [s.strip() for s in code.split(";") if s.strip()]
    idempotent = re.compile(
        r"^(ALTER TABLE \S+ ADD COLUMN IF NOT EXISTS|CREATE (?:UNIQUE )?INDEX IF NOT EXISTS|CREATE OR REPLACE FUNCTION"
        r"|DROP TRIGGER IF EXISTS|CREATE (?:UNLOGGED )?TABLE IF NOT EXISTS|DROP FUNCTION IF EXISTS"
        # The claim function's version, which workers check at start: replaced, never added.
        r"|COMMENT ON FUNCTION public\.claim_next_fila_teste_v2\("
        r"|COMMENT ON FUNCTION public\.claim_limited_fila_teste_v2\("
        # ... and the previous release's, made a call of this release's.
        r"|COMMENT ON FUNCTION public\.claim_next_fila_teste\("
        # The block that drops indexes whose definition changed: only when it differs
        # (run twice for real in tests/integration/test_upgrade_from_1_2_2.py).
        r"|DO \$\$body\$\$$)"
    )
    assert len(statements) >= 10
    creates_trigger = [s for s in statements if s.startswith("CREATE TRIGGER")]
    # The insert trigger and wait_for_task's end trigger, each after its DROP TRIGGER IF EXISTS.
    assert len(creates_trigger) == 2
    assert "DROP TRIGGER IF EXISTS trigger_insert_fila_teste ON public.fila_teste" in ddl
    assert "DROP TRIGGER IF EXISTS trigger_end_fila_teste ON public.fila_teste" in ddl
    for statement in statements:
        if statement.startswith("CREATE TRIGGER"):
            continue
        assert idempotent.match(statement), statement


MALICIOUS = [
    ("public", "x;drop table y"),
    ("public", "a b"),
    ("public", '"q"'),
    ("public", "q'"),
    ("public", "1abc"),
    ("public", ""),
    ("public", "q" * 60),  # fits 63, but idx_<q>_subscriber_processo does not
    ("public", "fila\n"),
    ("public", "fila-teste"),
    ("public", "açaí"),
    ("public", "s.t"),
    ("x;drop table y", "fila"),
    ("", "fila"),
    ("pub lic", "fila"),
]


@pytest.mark.parametrize("upgrade", [False, True], ids=["create", "upgrade"])
@pytest.mark.parametrize("schema, queue", MALICIOUS)
def test_refused_names_exit_2_with_nothing_on_stdout(schema, queue, upgrade):
    result = db_gen(schema, queue, *(["--upgrade"] if upgrade else []))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip()
    assert "db_gen" in result.stderr


def test_longest_accepted_queue_name():
    # idx_<q>_subscriber_processo is the longest derived name: 4 + len(q) + 21 <= 63.
    longest = "q" * (63 - len("idx__subscriber_processo"))
    assert db_gen("public", longest).returncode == 0
    assert db_gen("public", longest + "q").returncode == 2


@pytest.mark.parametrize(
    "args", [["public"], [], ["public", "fila", "--dialect", "oracle"], ["public", "fila", "extra"]]
)
def test_usage_errors_exit_2_with_nothing_on_stdout(args):
    result = db_gen(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip()


def test_output_is_deterministic():
    assert db_gen("public", "fila_teste").stdout == db_gen("public", "fila_teste").stdout


def test_server_option_is_for_the_dialects_with_server_variants_only():
    check_server_option("mysql", "mysql")  # no error: MySQL's DDL has server variants
    check_server_option("postgres", None)  # not given: nothing to check
    with pytest.raises(ValueError, match="applies to the mysql dialect only, not postgres"):
        check_server_option("postgres", "mysql")
    with pytest.raises(ValueError, match="applies to --dialect mysql only, not singlestore"):
        check_server_option("singlestore", "mariadb", named="--dialect {}")


def test_server_option_for_another_dialect_is_a_usage_error():
    result = db_gen("public", "fila", "--dialect", "postgres", "--server", "mysql")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "--server applies to --dialect mysql only, not postgres" in result.stderr


def test_the_partitioned_layout_is_for_postgres_and_mysql_only_and_says_so():
    result = db_gen("public", "fila", "--dialect", "singlestore", "--layout", "partitioned")
    assert result.returncode == 2 and result.stdout == ""
    assert (
        "--layout partitioned applies to the postgres and mysql dialects only, not singlestore"
        in result.stderr
    )
    mysql = db_gen("public", "fila", "--dialect", "mysql", "--layout", "partitioned")
    assert mysql.returncode == 0
    assert "PARTITION BY RANGE (finished_day) (PARTITION p_hot VALUES LESS THAN (2))" in (
        mysql.stdout
    )
    assert "CREATE TRIGGER public.trigger_finished_day_fila" in mysql.stdout
    plain_mysql = db_gen("public", "fila", "--dialect", "mysql")
    assert db_gen("public", "fila", "--dialect", "mysql", "--layout", "plain").stdout == (
        plain_mysql.stdout
    )
    assert "finished_day" not in plain_mysql.stdout
    partitioned = db_gen("public", "fila", "--layout", "partitioned")
    assert partitioned.returncode == 0
    assert "PARTITION BY RANGE (finished_day)" in partitioned.stdout
    assert "public.fila_hot PARTITION OF public.fila" in partitioned.stdout
    # The plain layout's DDL is unchanged by the option's default.
    assert db_gen("public", "fila", "--layout", "plain").stdout == db_gen("public", "fila").stdout
