"""The named-query loader and the template renderer."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from nsj_queue_lib.db import sql_files
from nsj_queue_lib.db.postgres.store import PostgresQueueStore

# What the client and the runtime call by name.
REQUIRED_QUERIES = {
    "insert_task",
    "insert_tasks",
    "list_equivalent",
    "get_task",
    "claim_uncommitted",
    "fail_and_retry",
    "fail_and_bury",
    "release_task",
    "purge",
    "list_subscribers",
}


def _parse(text: str, monkeypatch) -> dict[str, str]:
    """load_queries on ``text`` instead of a dialect's file (bypassing the cache)."""
    monkeypatch.setattr(sql_files, "read_sql", lambda dialect, filename: text)
    return sql_files.load_queries.__wrapped__("fake")


def test_named_queries_are_parsed(monkeypatch):
    text = (
        "-- preamble comment, not a query\n\n"
        "-- name: first\nSELECT 1;\n\n"
        "-- name: second\n-- a comment inside\nSELECT {x}\nFROM t;\n"
    )
    queries = _parse(text, monkeypatch)
    assert list(queries) == ["first", "second"]
    assert queries["first"] == "SELECT 1"
    assert queries["second"] == "-- a comment inside\nSELECT {x}\nFROM t"


def test_duplicate_names_are_rejected(monkeypatch):
    with pytest.raises(ValueError, match="twice"):
        _parse("-- name: one\nSELECT 1\n-- name: one\nSELECT 2\n", monkeypatch)


def test_render_replaces_known_placeholders_only():
    assert sql_files.render("SELECT * FROM {table} WHERE x = '{}'", {"table": "public.q"}) == (
        "SELECT * FROM public.q WHERE x = '{}'"
    )
    # Upper case and non-identifier braces are not placeholders.
    assert sql_files.render("SELECT '{A}', '{1}'", {}) == "SELECT '{A}', '{1}'"


def test_placeholder_without_value_raises():
    with pytest.raises(KeyError, match="missing_one"):
        sql_files.render("SELECT * FROM {table} JOIN {missing_one}", {"table": "t"})


def test_render_queries_with_a_missing_value_raises():
    with pytest.raises(KeyError):
        sql_files.render_queries("postgres", {"queue_table": "public.q"})


def test_postgres_queries_are_all_there_and_fully_rendered():
    store = PostgresQueueStore("public.q", "public.q_subscriber")
    assert REQUIRED_QUERIES <= set(store.sql)
    for name in REQUIRED_QUERIES:
        assert "public.q" in store.sql[name], name
    for name, sql in store.sql.items():
        assert sql.strip(), name
        assert not sql.rstrip().endswith(";"), name
        assert not re.search(r"\{[a-z_]+\}", sql), f"{name} has an unrendered placeholder"


# The claim is each dialect's own: PostgreSQL's claim function and MySQL's claim
# procedure live in the DDL, and what remains in queries.sql serves them and the
# socket server's claim without database locks. So is the vacuum (PostgreSQL's
# only: InnoDB purges old row versions itself; its ANALYZE is shared), and the
# partitioned layout's hot partition's size, which the vacuum service rewrites.
CLAIM_QUERIES = {
    "postgres": {
        "claim_settings",
        "claim_uncommitted",
        "hot_space",
        "notify",
        "vacuum",
    },
    # And MySQL's partitioned layout (db/mysql/layout.py): its retention (PostgreSQL's
    # reads its catalog in db/postgres/retention.py; how a store finds the layout is
    # db/mysql/by_task_id.sql's).
    # And a fair key's turn, which MySQL reads before its INSERT ... VALUES (no subquery
    # on the table it writes); PostgreSQL's keyed insert computes it (fleet/fair.py).
    "mysql": {"claim_tasks", "retention", "fair_turn"},
    "singlestore": {"claim_tasks", "retention", "fair_turn"},
}


def test_every_dialect_has_the_same_query_names_but_its_claims():
    """Design rule: one set of names across dialects, the claim path aside (only checked where
    a dialect has queries.sql)."""
    root = resources.files("nsj_queue_lib.db")
    dialects = sorted(
        entry.name
        for entry in root.iterdir()
        if entry.is_dir() and entry.joinpath("queries.sql").is_file()
    )
    assert set(dialects) == set(CLAIM_QUERIES)
    shared = set(sql_files.load_queries("postgres")) - CLAIM_QUERIES["postgres"]
    assert REQUIRED_QUERIES - {"claim_uncommitted"} <= shared
    for dialect in dialects:
        assert set(sql_files.load_queries(dialect)) == shared | CLAIM_QUERIES[dialect], dialect


def test_a_dialect_inherits_the_queries_it_does_not_redefine(monkeypatch):
    files = {
        "parent": "-- name: shared\nSELECT 'parent'\n-- name: changed\nSELECT 'parent'\n",
        "child": "-- base: parent\n-- name: changed\nSELECT 'child'\n",
    }
    sql_files.load_queries.cache_clear()
    monkeypatch.setattr(sql_files, "read_sql", lambda dialect, filename: files[dialect])
    try:
        assert sql_files.load_queries("child") == {
            "shared": "SELECT 'parent'",
            "changed": "SELECT 'child'",
        }
    finally:
        sql_files.load_queries.cache_clear()


def test_singlestore_writes_only_the_queries_that_differ_from_mysql():
    mysql, singlestore = sql_files.load_queries("mysql"), sql_files.load_queries("singlestore")
    own = sql_files._NAME_LINE.findall(sql_files.read_sql("singlestore", "queries.sql"))
    assert own and all(singlestore[name] != mysql[name] for name in own)
    assert set(singlestore) == set(mysql)
