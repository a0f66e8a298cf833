"""A hook run once, just before the next statement anything sends on a connection.

Group commit (db/postgres/session.py) sets a savepoint before each handler of a
group, so that a failing handler is rolled back alone. Most of the time the
savepoint is a round trip for nothing: many handlers never use ``bd_conn``, and
one that does not use it has nothing to roll back. So the group arms this hook
instead, and the savepoint is sent only when the handler sends its first
statement, right before it: the handler's writes and its failure's rollback are
exactly what they were with the savepoint set in advance.

Every statement psycopg sends goes through one of two places of the connection,
which the hook wraps: ``_start_query`` (every cursor's ``execute``,
``executemany``, ``stream``, ``copy``, a server cursor's declaration) and
``_exec_command`` (``commit()``, ``rollback()``, ``transaction()``, a server
cursor's fetches); entering pipeline mode (``pipeline()``, and ``executemany``)
runs it first, since a blocking statement is not allowed there. Should the
hook fail anyway, the connection says so and group commit treats the handler
as one without a savepoint. Statements sent through ``conn.pgconn``
(libpq itself) bypass psycopg, and the hook: the worker's own claim round trips
do, a handler must not (nor did it before: it is psycopg's private side).
The wrapped methods are psycopg internals (tested in
tests/integration/test_first_use_hook.py against the pinned psycopg).

Should a psycopg release rename them, the hook would silently never run: a
failing handler's writes would look like none (``UNUSED``) and commit with
its group. So ``hook_fires`` checks, once per process and connection class,
that they exist and that an armed hook runs before a real ``SELECT 1``; where
it does not, group commit sets each savepoint before its handler, as it did
before this hook (one WARNING names the psycopg version). The hook's state and
that check are shared with PyMySQL's hook (db/first_use.py).
"""

from __future__ import annotations

from typing import Any

import psycopg

from nsj_queue_lib.db.first_use import (
    FAILED,
    RAN,
    UNUSED,
    FiresCheck,
    FirstUseState,
    probe_select_1,
)

__all__ = ["FAILED", "RAN", "UNUSED", "WRAPPED", "FirstUseHook", "hook_fires"]

# The psycopg methods the hook wraps (private: a release may rename them).
WRAPPED = ("_start_query", "_exec_command", "pipeline", "_pipeline_nolock")

_check = FiresCheck(f"psycopg {psycopg.__version__}", psycopg.Error)


def hook_fires(conn: Any) -> bool:
    """Whether the first-use hook works on ``conn``'s class (checked on ``conn`` the first
    time: a ``SELECT 1`` in its open transaction, nothing else armed). False, with one
    WARNING, when it does not: the caller sets its savepoints at once."""
    return _check(conn, _fires)


def _fires(conn: Any) -> bool:
    if not all(callable(getattr(psycopg.Connection, name, None)) for name in WRAPPED):
        return False
    return probe_select_1(conn, lambda c: c.execute("SELECT 1").fetchone())


class FirstUseHook(FirstUseState):
    """Mixed into the executors' psycopg connections (``HandlerConnection``).

    The hook runs with psycopg's connection lock held: it must send its statement
    through libpq (``conn.pgconn``), never through psycopg (which would wait for the
    lock forever)."""

    # psycopg internals (generators driven by psycopg's wait loop): the hook runs when
    # the generator is first advanced, before anything of the statement is sent.

    def _start_query(self, *args: Any, **kwargs: Any) -> Any:
        self._nsjq_fire()
        return (yield from super()._start_query(*args, **kwargs))  # type: ignore[misc]

    def _exec_command(self, *args: Any, **kwargs: Any) -> Any:
        self._nsjq_fire()
        return (yield from super()._exec_command(*args, **kwargs))  # type: ignore[misc]

    # Pipeline mode refuses the hook's blocking statement: it runs before entering it
    # (``pipeline()``; ``_pipeline_nolock()``, entered by ``executemany``).

    def pipeline(self) -> Any:
        self._nsjq_fire()
        return super().pipeline()  # type: ignore[misc]

    def _pipeline_nolock(self) -> Any:
        self._nsjq_fire()
        return super()._pipeline_nolock()  # type: ignore[misc]
