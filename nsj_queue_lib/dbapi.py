"""The connection type the public API accepts: a DB-API connection.

``QueueClient`` and the handlers' ``bd_conn`` are psycopg 3, psycopg2 or
PyMySQL connections. They share no base class, so the API names what it uses
of them structurally; any of the three type-checks as a ``DBConnection``.
"""

from __future__ import annotations

from typing import Any, Protocol


class DBConnection(Protocol):
    def cursor(self, *args: Any, **kwargs: Any) -> Any: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


CONN_ATTRIBUTE_MESSAGE = (
    "bd_conn.conn: bd_conn is the database connection itself since nsj-queue-lib 2 "
    "(1.2.2 passed a nsj_sql_utils_lib DBConnection); write DBAdapter3(bd_conn) "
    "instead of DBAdapter3(bd_conn.conn)"
)


class LegacyConnAttribute:
    """Mixed into the connections handlers get: ``bd_conn.conn`` is ``bd_conn``.

    nsj-queue-lib 1.2.2 handed handlers a ``nsj_sql_utils_lib`` ``DBConnection``,
    and handlers wrote ``DBAdapter3(bd_conn.conn)``; that line keeps working, in
    the task's transaction, with a ``DeprecationWarning`` naming the one-line change.
    """

    @property
    def conn(self) -> Any:
        import warnings

        warnings.warn(CONN_ATTRIBUTE_MESSAGE, DeprecationWarning, stacklevel=2)
        return self
