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
