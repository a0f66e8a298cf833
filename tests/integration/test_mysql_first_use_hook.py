"""The worker's PyMySQL connections run an armed hook before a handler's first command, by
every way PyMySQL sends one (db/mysql/first_use.py): group commit's savepoint depends on it."""

from __future__ import annotations

import os

import pymysql
import pytest

from nsj_queue_lib.db.mysql import first_use
from nsj_queue_lib.db.mysql.driver import HandlerConnection
from nsj_queue_lib.db.mysql.session import MysqlTaskSession
from nsj_queue_lib.db.task_session import GroupLost

pytestmark = pytest.mark.mysql

TABLE = f"nsjq_first_use_{os.getpid()}"  # one per xdist worker process


@pytest.fixture
def conn(mysql_kwargs):
    admin = pymysql.connect(**mysql_kwargs, autocommit=True)
    with admin.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
        cur.execute(f"CREATE TABLE {TABLE} (n int) ENGINE=InnoDB")
    # As the executors get it: no autocommit, a transaction open.
    connection = HandlerConnection(**mysql_kwargs, autocommit=False)
    connection.begin()
    yield connection
    connection.close()
    with admin.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
    admin.close()


def count(conn) -> int:
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {TABLE}")
        return cur.fetchone()[0]


def insert(conn) -> None:
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {TABLE} VALUES (1)")


def insert_many(conn) -> None:
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {TABLE} VALUES (%s)", [(1,), (2,)])


def unbuffered(conn) -> None:
    with conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(f"SELECT n FROM {TABLE}")
        cur.fetchall()
    insert(conn)


def direct_query(conn) -> None:
    conn.query(f"INSERT INTO {TABLE} VALUES (1)")


def select_db(conn) -> None:
    conn.select_db(conn.db.decode())
    insert(conn)


WAYS = [insert, insert_many, unbuffered, direct_query, select_db]


@pytest.mark.parametrize("way", WAYS, ids=lambda way: way.__name__)
def test_the_hook_runs_once_before_the_first_command(conn, way):
    calls = []

    def hook():
        calls.append(1)
        with conn.cursor() as cur:  # as group commit's: on the same connection
            cur.execute("SAVEPOINT first_use")

    conn.arm_first_use(hook)
    way(conn)
    insert(conn)  # a second statement: the hook ran once
    assert calls == [1]
    assert conn.disarm_first_use() == first_use.RAN
    with conn.cursor() as cur:
        cur.execute("ROLLBACK TO SAVEPOINT first_use")
    # The savepoint came before the first statement: all of the handler's writes are gone.
    assert count(conn) == 0


@pytest.mark.parametrize("end", ["commit", "rollback", "begin"])
def test_the_hook_runs_before_the_handler_ends_the_transaction(conn, end):
    insert(conn)
    seen = []
    conn.arm_first_use(lambda: seen.append(count(conn)))
    getattr(conn, end)()
    assert seen == [1]  # still inside the transaction: its insert visible


def test_an_unused_connection_leaves_the_hook_armed(conn):
    conn.arm_first_use(lambda: pytest.fail("no command was sent"))
    conn.cursor()  # a cursor alone sends nothing
    assert conn.disarm_first_use() == first_use.UNUSED
    insert(conn)  # disarmed: nothing runs


def test_a_failing_hook_is_told_and_the_statement_goes_on(conn):
    error = RuntimeError("no savepoint")

    def hook():
        raise error

    conn.arm_first_use(hook)
    insert(conn)
    assert conn.first_use_error is error
    assert conn.disarm_first_use() == first_use.FAILED
    assert count(conn) == 1


def test_a_group_lost_by_the_first_savepoint_fails_the_handlers_success(conn):
    """The deadlock that rolled the group's transaction back is silent on MariaDB: the
    handler's statements went on in a new transaction, so its success must not count."""
    ops = MysqlTaskSession.__new__(MysqlTaskSession)  # succeeded() needs no store
    lost = GroupLost("writing the group's first successes failed")

    def hook():
        raise lost

    conn.arm_first_use(hook)
    insert(conn)
    with pytest.raises(GroupLost):
        ops.succeeded(conn, None, "ok")
    # Another failure of the savepoint (the connection's, say) is the handler's business.
    conn.arm_first_use(lambda: 1 / 0)
    insert(conn)
    ops.succeeded(conn, None, "ok")


def test_the_self_check_finds_the_hook_running_on_the_pinned_pymysql(conn):
    first_use._check.checked.pop(HandlerConnection, None)
    assert first_use.hook_fires(conn)
    assert conn.disarm_first_use() == first_use.UNUSED  # the check left nothing armed
    assert first_use._check.checked[HandlerConnection] is True
