"""The text of MySQL's 'sucesso' statement (db/mysql/successes.py; a group's end): ids as
ints, each distinct message escaped once by the connection."""

from __future__ import annotations

import pymysql.converters
import pytest

from nsj_queue_lib.db.mysql.successes import id_list, mensagem_by_id, success_sql


class EscapingConn:
    def __init__(self):
        self.escaped: list[str] = []

    def escape(self, value: str) -> str:
        self.escaped.append(value)
        return pymysql.converters.escape_item(value, "utf8mb4")


def written(*pairs):
    return list(pairs)


def test_ids_are_validated_as_ints():
    assert id_list([1, "22", 333]) == "1, 22, 333"
    with pytest.raises(ValueError):
        id_list(["1) OR (1"])


def test_equal_messages_are_one_literal():
    conn = EscapingConn()
    assert mensagem_by_id(conn, written((1, "it's"), (2, "it's"))) == "'it\\'s'"
    assert conn.escaped == ["it's"]


def test_different_messages_are_a_case_over_ids_grouped_by_message():
    conn = EscapingConn()
    expression = mensagem_by_id(conn, written((1, "a"), (2, "b"), (3, "a"), (4, "c")))
    assert expression == "CASE WHEN id IN (1, 3) THEN 'a' WHEN id IN (2) THEN 'b' ELSE 'c' END"
    assert sorted(conn.escaped) == ["a", "b", "c"]


def test_the_statement_is_fenced_on_processando():
    sql = success_sql(EscapingConn(), "fila", written((7, "ok"), (9, "ok")))
    assert sql == (
        "UPDATE fila SET status = 'sucesso', mensagem = 'ok', finished_at = NOW(6) "
        "WHERE id IN (7, 9) AND status = 'processando'"
    )
