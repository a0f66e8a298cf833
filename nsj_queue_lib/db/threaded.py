"""An async handler's ``bd_conn`` where the database has no async driver that fits: the
task's own DB-API connection, each call run in a thread so the event loop goes on.

Used on MySQL/MariaDB (PyMySQL). aiomysql and asyncmy exist, but the task's
transaction, its claim and its liveness lock (a named lock) live on the
session of the executor's PyMySQL connection: an async driver would be a
second session, outside that transaction. So the handler gets this wrapper
around that very connection instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


class ThreadedConnection:
    """``await bd_conn.execute(sql, params)`` runs on the task's connection in a thread.

    ``raw`` is the DB-API connection itself (for libraries that need one, inside
    ``await bd_conn.run(function)``).
    """

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """``function(raw, *args)`` in a thread; its result."""
        return await asyncio.to_thread(function, self.raw, *args)

    async def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> Any:
        """Run one statement; its rows (a list of tuples), or its row count when it returns none."""

        def work(raw: Any) -> Any:
            with raw.cursor() as cursor:
                count = cursor.execute(sql, params)
                return list(cursor.fetchall()) if cursor.description else count

        return await self.run(work)

    async def commit(self) -> None:
        await self.run(lambda raw: raw.commit())

    async def rollback(self) -> None:
        await self.run(lambda raw: raw.rollback())

    async def close(self) -> None:
        await self.run(lambda raw: raw.close())

    @property
    def closed(self) -> bool:
        return not getattr(self.raw, "open", True)
