"""The periodic table's SQL (``<queue>_periodic``): the latest slot enqueued per processo.

Plain DB-API calls with ``%(name)s`` parameters, which psycopg 3 and PyMySQL
both speak; each dialect's statements live in ``db/<dialect>/periodic.sql``
(SingleStore shares MySQL's). The caller owns the transaction.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.dialect import UPGRADE_HINT, periodic_table_name
from nsj_queue_lib.db.driver import driver_class
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.exceptions import ClaimRoutineError
from nsj_queue_lib.identifiers import check_table_name, split_table_name


class PeriodicStore:
    def __init__(self, dialect: str, queue_table: str):
        self.family = driver_class(dialect).periodic_sql
        self.table = check_table_name(periodic_table_name(queue_table), "periodic table")
        self.sql = render_queries(self.family, {"periodic_table": self.table}, "periodic.sql")

    def _execute(self, conn: Any, name: str, params: dict[str, Any]) -> Any:
        cur = conn.cursor()
        try:
            cur.execute(self.sql[name], params)
            return cur.rowcount if cur.description is None else cur.fetchone()
        finally:
            cur.close()

    def check(self, conn: Any) -> None:
        """Raise ``ClaimRoutineError`` (a schema to upgrade) when the table is missing."""
        schema, name = split_table_name(self.table)
        params = {"table": self.table, "schema": schema, "name": name}
        if not self._execute(conn, "periodic_table_exists", params)[0]:
            raise ClaimRoutineError(
                f"the queue's periodic table {self.table} is missing; periodic tasks (@Task "
                f"cron= or every_s=) need it. Bring the queue up to date with {UPGRADE_HINT} "
                "(run its output once), then start the worker again"
            )

    def register(self, conn: Any, processo: str, slot: int) -> None:
        """A row for ``processo`` at ``slot`` unless it has one."""
        self._execute(conn, "periodic_register", {"processo": processo, "slot": slot})

    def take_slot(self, conn: Any, processo: str, slot: int) -> bool:
        """Move ``processo``'s latest slot to ``slot``; False when it is there already (or
        later). Holds the row's lock until the transaction ends."""
        self._execute(conn, "periodic_lock_timeout", {})
        params = {"processo": processo, "slot": slot}
        return bool(self._execute(conn, "periodic_take_slot", params))

    def record_task(self, conn: Any, processo: str, task_id: int) -> None:
        self._execute(conn, "periodic_record_task", {"processo": processo, "task_id": task_id})
