"""The side tables' purge statements (db/side_store.py) as sent, without a database."""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.side_store import MYSQL_LIST, SideStore, side_tables


class Recorder:
    """A connection whose statements find nothing, their parameters kept."""

    def __init__(self) -> None:
        self.params: list[dict[str, Any]] = []
        self.statements: list[str] = []

    def cursor(self) -> Recorder:
        return self

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, sql: str, params: dict[str, Any]) -> None:
        self.statements.append(sql)
        self.params.append(params)
        self.rowcount = 0

    def ids_deleted_from(self, table: str) -> list[int]:
        return [
            i
            for sql, params in zip(self.statements, self.params, strict=True)
            if sql.startswith(f"DELETE FROM {table} ")
            for i in params["ids"]
        ]

    def fetchall(self) -> list[tuple[Any, ...]]:
        return []


def test_mariadb_never_gets_an_id_list_it_would_turn_into_a_join():
    """At 1000 values (in_predicate_conversion_threshold) MariaDB joins the list as a
    table, and read the chain index's whole table for it: a round of 1000 tasks goes in
    lists of MYSQL_LIST."""
    conn = Recorder()
    side = SideStore("mysql", "s.q")
    tasks = list(range(1, 2501))
    assert side.clear(conn, tasks, frozenset(side_tables("s.q"))) == 2500
    lists = [v for p in conn.params for v in p.values() if isinstance(v, tuple)]
    assert lists and max(len(v) for v in lists) == MYSQL_LIST < 1000
    assert sorted(conn.ids_deleted_from("s.q_steps")) == tasks


def test_postgres_takes_a_round_in_one_array_per_statement():
    conn = Recorder()
    side = SideStore("postgres", "s.q")
    assert side.clear(conn, range(1, 2501), frozenset(side_tables("s.q"))) == 2500
    lists = [v for p in conn.params for v in p.values() if isinstance(v, list)]
    assert max(len(v) for v in lists) == 2500
    assert conn.ids_deleted_from("s.q_steps") == list(range(1, 2501))
