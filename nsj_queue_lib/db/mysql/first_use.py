"""A hook run once, just before the next command anything sends on a PyMySQL connection.

Group commit (db/mysql/group.py) needs a savepoint before each handler of a
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
PyMySQL version).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pymysql

from nsj_queue_lib.log import get_logger

logger = get_logger("group_commit")

# What became of an armed hook (``FirstUseHook.disarm_first_use``).
UNUSED, RAN, FAILED = "unused", "ran", "failed"

_checked: dict[type, bool] = {}  # connection class -> whether the hook fires there
_checked_lock = threading.Lock()


def hook_fires(conn: Any) -> bool:
    """Whether the first-use hook works on ``conn``'s class (checked on ``conn`` the first
    time: a ``SELECT 1`` in its open transaction, nothing else armed). False, with one
    WARNING, when it does not: the caller sets its savepoints at once."""
    cls = type(conn)
    known = _checked.get(cls)
    if known is not None:
        return known
    try:
        fires = _fires(conn)
    except pymysql.MySQLError:
        return False  # a broken connection tells nothing: the eager savepoint fails there
    with _checked_lock:
        if cls not in _checked:
            _checked[cls] = fires
            if not fires:
                logger.warning(
                    "PyMySQL %s: the hook that sets a group's savepoint before a handler's "
                    "first statement does not run (PyMySQL internals changed); group commit "
                    "sets each savepoint before its handler instead (one round trip more)",
                    pymysql.__version__,
                )
        return _checked[cls]


def _fires(conn: Any) -> bool:
    if not isinstance(conn, FirstUseHook):
        return False
    if not callable(getattr(pymysql.connections.Connection, "_execute_command", None)):
        return False
    hooked: Any = conn  # a PyMySQL connection with the hook mixed in
    hooked.arm_first_use(lambda: None)
    try:
        with hooked.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchall()
    finally:
        state = hooked.disarm_first_use()
    return state == RAN


class FirstUseHook:
    """Mixed into the worker's PyMySQL connections (``HandlerConnection``)."""

    _nsjq_first_use: Callable[[], None] | None = None
    _nsjq_first_use_state = UNUSED
    # What the hook raised (FAILED), until the next arm: the caller tells a lost group's
    # failure from a savepoint's (a deadlock's rollback is silent on MariaDB: the
    # handler's statements go on in a new transaction).
    first_use_error: BaseException | None = None

    def arm_first_use(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` before the next command sent (once). An exception of the hook is
        kept (``disarm_first_use`` says FAILED) and the command goes on. The hook may send
        statements on this connection: it is disarmed before it runs."""
        self._nsjq_first_use = hook
        self._nsjq_first_use_state = UNUSED
        self.first_use_error = None

    def run_first_use_now(self, hook: Callable[[], None]) -> None:
        """Arm ``hook`` and run it at once (where the hook would not fire: ``hook_fires``);
        ``disarm_first_use`` then says RAN or FAILED, as if a command had been sent."""
        self.arm_first_use(hook)
        self._nsjq_fire()

    def disarm_first_use(self) -> str:
        """Forget the hook: UNUSED when no command was sent since it was armed (it never
        ran), RAN, or FAILED (it raised)."""
        self._nsjq_first_use = None
        state, self._nsjq_first_use_state = self._nsjq_first_use_state, UNUSED
        return state

    def _nsjq_fire(self) -> None:
        hook = self._nsjq_first_use
        if hook is None:
            return
        self._nsjq_first_use = None  # first: the hook's own statement must not recurse
        try:
            hook()
        except Exception as exc:  # noqa: BLE001 - told by disarm_first_use, not to the handler
            self._nsjq_first_use_state = FAILED
            self.first_use_error = exc
        else:
            self._nsjq_first_use_state = RAN

    def _execute_command(self, command: int, sql: Any) -> Any:
        self._nsjq_fire()
        return super()._execute_command(command, sql)  # type: ignore[misc]
