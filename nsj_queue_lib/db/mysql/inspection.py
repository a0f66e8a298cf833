"""What the ``nsjq`` command reads of a queue on MySQL, MariaDB and SingleStore
(``InspectionStore``).

Queries in ``inspection.sql`` (SingleStore runs MySQL's); PyMySQL connections.
Times are read as epoch seconds, so a session in any time zone sees the same
instants. Driver errors leave as ``DatabaseError``.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db import tally
from nsj_queue_lib.db.inspection import InspectionQueries, query_values, task_filter
from nsj_queue_lib.db.mysql.errors import wrap_driver_errors
from nsj_queue_lib.db.mysql.names import table_exists
from nsj_queue_lib.db.mysql.rows import split_steps
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.identifiers import check_table_name

_TIME = "UNIX_TIMESTAMP(t.{c})"
_FILTER = task_filter("t.status IN %(statuses)s", "FROM_UNIXTIME({p})")


class MysqlInspectionStore(InspectionQueries):
    def __init__(self, queue_table: str):
        self.queue_table = check_table_name(queue_table, "queue table")
        queries = render_queries(
            "mysql", query_values(queue_table, _TIME, _FILTER), "inspection.sql"
        )
        self.sql = {name: split_steps(text) for name, text in queries.items()}
        self._tallied: bool | None = None

    def tallied(self, conn: Any) -> bool:
        if self._tallied is None:
            with wrap_driver_errors("tally tables"):
                state = tally.table_values(self.queue_table)["tally_state_table"]
                self._tallied = table_exists(conn, state)
        return self._tallied

    def _fetch(self, conn: Any, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        with wrap_driver_errors(name), conn.cursor() as cur:
            cur.execute(self.sql[name]["sql"], params)
            names = [col[0] for col in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def retry_task(self, conn: Any, task_id: int) -> int | None:
        steps = self.sql["retry_task"]
        with wrap_driver_errors("retry_task"), conn.cursor() as cur:
            cur.execute(steps["latest"], {"id": task_id})
            row = cur.fetchone()
            if row is None:
                return None
            latest = {"id": int(row[0])}
            if cur.execute(steps["mark"], latest) != 1:
                return None
            cur.execute(steps["insert"], latest)
            return int(cur.lastrowid)
