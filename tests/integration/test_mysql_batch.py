"""db/mysql/batch.py on a real MariaDB: one round trip with multi-statements, the same results without."""

from __future__ import annotations

import uuid

import pytest
from pymysql.constants import CLIENT

from nsj_queue_lib.db.mysql.batch import (
    StatementFailed,
    accepts_multi_statements,
    call_procedure,
    run_batch,
)
from tests.helpers.mysql_queue import connect

pytestmark = pytest.mark.mysql

MODES = {"multi": CLIENT.MULTI_STATEMENTS, "one_by_one": 0}


@pytest.fixture(params=sorted(MODES))
def conn(request, mysql_kwargs):
    conn = connect(mysql_kwargs, autocommit=True, client_flag=MODES[request.param])
    assert accepts_multi_statements(conn) == (request.param == "multi")
    yield conn
    conn.close()


@pytest.fixture
def table(mysql_kwargs):
    name = f"batch_{uuid.uuid4().hex[:10]}"
    admin = connect(mysql_kwargs, autocommit=True)
    with admin.cursor() as cur:
        cur.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(200)) ENGINE=InnoDB")
    yield name
    with admin.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {name}")
    admin.close()


def rows(conn, table):
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, v FROM {table} ORDER BY id")
        return cur.fetchall()


def test_results_come_back_per_statement_in_order(conn, table):
    results = run_batch(
        conn,
        [
            ("BEGIN", None),
            (
                f"INSERT INTO {table} (id, v) VALUES (%(a)s, %(v)s), (%(b)s, %(v)s)",
                {"a": 1, "b": 2, "v": "x"},
            ),
            (f"UPDATE {table} SET v = %(v)s WHERE id IN %(ids)s", {"v": "y", "ids": [1, 2, 3]}),
            (f"SELECT id, v FROM {table} ORDER BY id", None),
            ("COMMIT", None),
        ],
    )
    assert [r.rowcount for r in results[1:3]] == [2, 2]
    assert results[3].names == ("id", "v") and results[3].rows == ((1, "y"), (2, "y"))
    assert results[0].rows == () and results[4].names == ()
    assert rows(conn, table) == ((1, "y"), (2, "y"))


def test_values_are_escaped_never_executed(conn, table):
    hostile = "x'); DROP TABLE nothing; -- ; \\' \" %s %(v)s"
    run_batch(
        conn,
        [
            (f"INSERT INTO {table} (id, v) VALUES (1, %(v)s)", {"v": hostile}),
            (f"SELECT v FROM {table}", None),
        ],
    )
    assert rows(conn, table) == ((1, hostile),)


def test_a_failing_statement_stops_the_batch_and_says_which(conn, table):
    with pytest.raises(StatementFailed) as info:
        run_batch(
            conn,
            [
                (f"INSERT INTO {table} (id, v) VALUES (1, 'a')", None),
                (f"INSERT INTO {table} (id, v) VALUES (1, 'duplicate')", None),
                (f"INSERT INTO {table} (id, v) VALUES (2, 'never')", None),
            ],
        )
    failed = info.value
    assert failed.index == 1 and failed.error.args[0] == 1062  # ER_DUP_ENTRY
    assert failed.__cause__ is failed.error and len(failed.results) == 1
    assert rows(conn, table) == ((1, "a"),)  # the first ran, the third did not
    # The connection is in step for what comes next.
    assert run_batch(conn, [("SELECT 41 + 1", None)])[0].rows == ((42,),)


def test_multi_statements_take_one_round_trip(conn, table, monkeypatch):
    sent = []
    real = conn._execute_command

    def counting(command, sql):  # each call sends one command packet to the server
        sent.append(sql)
        return real(command, sql)

    monkeypatch.setattr(conn, "_execute_command", counting)
    run_batch(
        conn, [("BEGIN", None), (f"INSERT INTO {table} VALUES (1, 'a')", None), ("COMMIT", None)]
    )
    assert len(sent) == (1 if accepts_multi_statements(conn) else 3)
    assert rows(conn, table) == ((1, "a"),)


@pytest.fixture
def procedure(mysql_kwargs, table):
    """A procedure that inserts a row, returns the table, then fails when told to (after its result set)."""
    name = f"{table}_proc"
    admin = connect(mysql_kwargs, autocommit=True)
    with admin.cursor() as cur:
        cur.execute(f"""
            CREATE PROCEDURE {name}(IN p_id INT, IN p_fail BOOLEAN)
            BEGIN
                INSERT INTO {table} (id, v) VALUES (p_id, 'from the procedure');
                SELECT id, v FROM {table} ORDER BY id;
                IF p_fail THEN
                    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'failed after its result set (test)';
                END IF;
            END""")
    yield name
    with admin.cursor() as cur:
        cur.execute(f"DROP PROCEDURE IF EXISTS {name}")
    admin.close()


def test_call_procedure_returns_its_result_set_and_leaves_the_connection_usable(
    conn, table, procedure
):
    result = call_procedure(conn, (f"CALL {procedure}(%(id)s, %(fail)s)", {"id": 1, "fail": False}))
    assert result.names == ("id", "v") and result.rows == ((1, "from the procedure"),)
    assert rows(conn, table) == (
        (1, "from the procedure"),
    )  # nothing left unread on the connection


def test_call_procedure_reports_a_failure_after_the_result_set(conn, table, procedure):
    with pytest.raises(StatementFailed) as info:
        call_procedure(conn, (f"CALL {procedure}(%(id)s, %(fail)s)", {"id": 2, "fail": True}))
    assert info.value.index == 0 and "failed after its result set" in str(info.value.error)
    assert rows(conn, table) == (
        (2, "from the procedure"),
    )  # autocommit: the insert before it stays
