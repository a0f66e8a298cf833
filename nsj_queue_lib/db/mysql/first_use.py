"""A hook run once, just before the next command anything sends on a PyMySQL connection.

Group commit (db/mysql/session.py) needs a savepoint before each handler of a
group, so that a failing handler is rolled back alone. Most of the time that
savepoint is a round trip for nothing: many handlers never use ``bd_conn``,
and one that does not has nothing to roll back. On MariaDB the SAVEPOINT was
a group's most frequent statement (one per task, against one claim, one
UPDATE and one commit per group), and MariaDB pays more per statement than
per row. So the group arms this hook instead, and the savepoint is sent only
when the handler sends its first command, right before it: the handler's
writes and its failure's rollback are exactly what they were with the
savepoint set in advance. (PostgreSQL does the same: db/postgres/first_use.py.)

Every command PyMySQL sends to the server goes through one method of the
connection, ``_execute_command`` (a cursor's ``execute``, ``executemany``,
``callproc``, ``commit()``, ``rollback()``, ``begin()``, ``select_db()``,
``ping()``), which the hook wraps. It is a PyMySQL internal (tested in
tests/integration/test_mysql_first_use_hook.py against the pinned PyMySQL):
``hook_fires`` checks once per process and connection class that an armed
hook runs before a real ``SELECT 1``; where it does not, group commit sets
each savepoint before its handler, as it did before (one WARNING names the
PyMySQL version). The hook may send its savepoint on the same connection:
it is disarmed before it runs.
"""

from __future__ import annotations

from typing import Any

import pymysql

from nsj_queue_lib.db.first_use import (
    FAILED,
    RAN,
    UNUSED,
    FiresCheck,
    FirstUseState,
    probe_select_1,
)

__all__ = ["FAILED", "RAN", "UNUSED", "FirstUseHook", "hook_fires"]

_check = FiresCheck(f"PyMySQL {pymysql.__version__}", pymysql.MySQLError)


def hook_fires(conn: Any) -> bool:
    """Whether the first-use hook works on ``conn``'s class (checked on ``conn`` the first
    time: a ``SELECT 1`` in its open transaction, nothing else armed)."""
    return _check(conn, _fires)


def _fires(conn: Any) -> bool:
    if not callable(getattr(pymysql.connections.Connection, "_execute_command", None)):
        return False
    return probe_select_1(conn, _select_1)


def _select_1(conn: Any) -> None:
    with conn.cursor() as cur:
        cur.execute("SELECT 1")
        cur.fetchall()


class FirstUseHook(FirstUseState):
    """Mixed into the worker's PyMySQL connections (``HandlerConnection``)."""

    def _execute_command(self, command: int, sql: Any) -> Any:
        self._nsjq_fire()
        return super()._execute_command(command, sql)  # type: ignore[misc]
