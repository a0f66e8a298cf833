"""What the ``nsjq`` command reads of a queue on PostgreSQL (``InspectionStore``).

Queries in ``inspection.sql``; psycopg 3 or psycopg2 connections. Driver errors
leave as ``DatabaseError``.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.inspection import InspectionQueries, query_values, task_filter
from nsj_queue_lib.db.postgres.client_store import rows_as_dicts
from nsj_queue_lib.db.postgres.errors import wrap_driver_errors
from nsj_queue_lib.db.postgres.layout import HOT_DAY
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.identifiers import check_table_name

_TALLY_AND_LAYOUT = (
    "SELECT to_regclass(%s) IS NOT NULL, "
    "(SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(%s))"
)
# timestamptz values arrive as aware datetimes: exact instants.
_TIME = "t.{c}"
_FILTER = task_filter("t.status = ANY(%(statuses)s::varchar[])", "to_timestamp({p})")


class PostgresInspectionStore(InspectionQueries):
    def __init__(self, queue_table: str):
        self.queue_table = check_table_name(queue_table, "queue table")
        self._values = query_values(queue_table, _TIME, _FILTER)
        self.sql = render_queries("postgres", self._values, "inspection.sql")
        self._tallied: bool | None = None

    def tallied(self, conn: Any) -> bool:
        """Also pins summary_tallied's look-ups of unfinished attempts to the hot partition
        on a partitioned table (db/postgres/layout.py)."""
        if self._tallied is None:
            state = self._values["tally_state_table"]
            with wrap_driver_errors("tally tables"), conn.cursor() as cur:
                cur.execute(_TALLY_AND_LAYOUT, (state, self.queue_table))
                found, partitioned = cur.fetchone()
            if partitioned:
                pinned = dict(self._values, hot_h=f"h.finished_day = {HOT_DAY} AND ")
                self.sql = render_queries("postgres", pinned, "inspection.sql")
            self._tallied = bool(found)
        return self._tallied

    def _fetch(self, conn: Any, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        with wrap_driver_errors(name), conn.cursor() as cur:
            cur.execute(self.sql[name], params)
            return rows_as_dicts(cur)

    def retry_task(self, conn: Any, task_id: int) -> int | None:
        with wrap_driver_errors("retry_task"), conn.cursor() as cur:
            cur.execute(self.sql["retry_task"], {"id": task_id})
            row = cur.fetchone()
        return None if row is None else int(row[0])
