"""What the ``nsjq`` command reads of a queue on MySQL, MariaDB and SingleStore
(``InspectionStore``).

Queries in ``inspection.sql`` (SingleStore runs MySQL's); PyMySQL connections.
Times are read as epoch seconds, so a session in any time zone sees the same
instants. Driver errors leave as ``DatabaseError``.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db import layout_cache, tally
from nsj_queue_lib.db.inspection import (
    RECENT_DAYS,
    RECENT_MARK,
    RECENT_SECONDS,
    InspectionQueries,
    query_values,
    recent_days_pin,
    summary_row,
    task_filter,
)
from nsj_queue_lib.db.mysql.errors import wrap_driver_errors
from nsj_queue_lib.db.mysql.layout import hot_pin
from nsj_queue_lib.db.mysql.names import table_exists
from nsj_queue_lib.db.mysql.rows import split_steps
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.identifiers import check_table_name

_TIME = "UNIX_TIMESTAMP(t.{c})"
_FILTER = task_filter("t.status IN %(statuses)s", "FROM_UNIXTIME({p})")


class MysqlInspectionStore(InspectionQueries):
    def __init__(self, queue_table: str):
        self.queue_table = check_table_name(queue_table, "queue table")
        self._values = query_values(queue_table, _TIME, _FILTER)
        self.sql = self._render(self._values)
        self._tallied: bool | None = None
        self._partitioned = False

    @staticmethod
    def _render(values: dict[str, Any]) -> dict[str, dict[str, str]]:
        queries = render_queries("mysql", values, "inspection.sql")
        return {name: split_steps(text) for name, text in queries.items()}

    def tallied(self, conn: Any) -> bool:
        """Also pins summary_tallied, depth and list_running to the hot partition on a
        partitioned table: a tallied queue, since SingleStore's (which run these queries,
        and have no information_schema.PARTITIONS of MariaDB's kind) have no tally."""
        if self._tallied is None:
            with wrap_driver_errors("tally tables"):
                state = tally.table_values(self.queue_table)["tally_state_table"]
                tallied = table_exists(conn, state)
                if tallied and layout_cache.partitioned(conn, "mysql", self.queue_table):
                    pins = dict(self._values, hot_t=hot_pin("t"), recent_t=RECENT_MARK)
                    self.sql = self._render(pins)
                    self._partitioned = True
            self._tallied = tallied
        return self._tallied

    def summary(self, conn: Any) -> list[dict[str, Any]]:
        if not self.tallied(conn) or not self._partitioned:
            return super().summary(conn)
        with wrap_driver_errors("summary"), conn.cursor() as cur:
            sql = self.sql["summary_tallied"]["sql"].replace(RECENT_MARK, self._recent(cur))
            cur.execute(sql, {"recent_seconds": RECENT_SECONDS})
            names = [col[0] for col in cur.description]
            return [summary_row(dict(zip(names, row, strict=True))) for row in cur.fetchall()]

    def _recent(self, cur: Any) -> str:
        return recent_days_pin(
            cur,
            f"SELECT (SELECT UNIX_TIMESTAMP(folded_at) DIV 86400 - {RECENT_DAYS}"
            f" FROM {self._values['tally_state_table']} WHERE id = 1),"
            " UNIX_TIMESTAMP() DIV 86400 + 1",
        )

    def depth(self, conn: Any) -> list[dict[str, Any]]:
        self.tallied(conn)  # the layout, and the statements pinned to it
        return super().depth(conn)

    def running(self, conn: Any, limit: int) -> list[dict[str, Any]]:
        self.tallied(conn)
        return super().running(conn, limit)

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
