"""What the ``nsjq`` command reads of a queue on PostgreSQL (``InspectionStore``).

Queries in ``inspection.sql``; psycopg 3 or psycopg2 connections. Driver errors
leave as ``DatabaseError``.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.inspection import (
    RECENT_DAYS,
    RECENT_MARK,
    RECENT_SECONDS,
    InspectionQueries,
    listed_row,
    query_values,
    recent_days_pin,
    summary_row,
    task_filter,
)
from nsj_queue_lib.db.postgres.errors import wrap_driver_errors
from nsj_queue_lib.db.postgres.held_status import (
    DEPTH_BLANK,
    held_attempts,
    held_by_worker,
    held_running,
    move_held,
)
from nsj_queue_lib.db.postgres.layout import HOT_DAY, NO_JIT
from nsj_queue_lib.db.postgres.rows import rows_as_dicts
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.identifiers import check_table_name

_TALLY_AND_LAYOUT = (
    "SELECT to_regclass(%s) IS NOT NULL, "
    "(SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(%s))"
)
_RECENT = {"recent_seconds": RECENT_SECONDS}
# timestamptz values arrive as aware datetimes: exact instants.
_TIME = "t.{c}"
_FILTER = task_filter("t.status = ANY(%(statuses)s::varchar[])", "to_timestamp({p})")


class PostgresInspectionStore(InspectionQueries):
    def __init__(self, queue_table: str):
        self.queue_table = check_table_name(queue_table, "queue table")
        self._values = query_values(queue_table, _TIME, _FILTER)
        self.sql = render_queries("postgres", self._values, "inspection.sql")
        self._tallied: bool | None = None
        self._partitioned = False

    def tallied(self, conn: Any) -> bool:
        """Also pins summary_tallied's look-ups of unfinished attempts to the hot partition
        on a partitioned table (db/postgres/layout.py)."""
        if self._tallied is None:
            state = self._values["tally_state_table"]
            with wrap_driver_errors("tally tables"), conn.cursor() as cur:
                cur.execute(_TALLY_AND_LAYOUT, (state, self.queue_table))
                found, partitioned = cur.fetchone()
            if partitioned:
                pinned = dict(
                    self._values,
                    hot_h=f"h.finished_day = {HOT_DAY} AND ",
                    hot_t=f"t.finished_day = {HOT_DAY} AND ",
                    recent_t=RECENT_MARK,
                )
                self.sql = render_queries("postgres", pinned, "inspection.sql")
                self._partitioned = True
            self._tallied = bool(found)
        return self._tallied

    def _fetch(self, conn: Any, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        with wrap_driver_errors(name), conn.cursor() as cur:
            cur.execute(self.sql[name], params)
            return rows_as_dicts(cur)

    def running(self, conn: Any, limit: int) -> list[dict[str, Any]]:
        """With QUEUE_ONE_WRITE's running attempts ('pendente' rows their group names)."""
        self.tallied(conn)  # the layout, and the statements pinned to it
        rows = super().running(conn, limit)
        with wrap_driver_errors("running"), conn.cursor() as cur:
            held = held_attempts(
                cur, self.queue_table, self._partitioned, self._values["attempt_columns"], limit
            )
        rows += [listed_row(row) for row in held]
        return sorted(rows, key=lambda row: row["id"], reverse=True)[:limit]

    def running_by_worker(self, conn: Any) -> dict[str | None, int]:
        """With QUEUE_ONE_WRITE's running attempts, counted for their group's worker."""
        self.tallied(conn)
        counts = super().running_by_worker(conn)
        with wrap_driver_errors("running_by_worker"), conn.cursor() as cur:
            held = held_by_worker(cur, self.queue_table, self._partitioned)
        for worker, tasks in held.items():
            counts[worker] = counts.get(worker, 0) + tasks
        return counts

    def depth(self, conn: Any) -> list[dict[str, Any]]:
        """The console's overview and /metrics' depth count QUEUE_ONE_WRITE's running tasks
        as running too, as ``summary`` does."""
        self.tallied(conn)  # the layout: held_running's look-ups pinned to the hot partition
        rows = super().depth(conn)
        with wrap_driver_errors("depth"), conn.cursor() as cur:
            held = held_running(cur, self.queue_table, self._partitioned)
        return move_held(rows, held, DEPTH_BLANK)

    def summary(self, conn: Any) -> list[dict[str, Any]]:
        """Without JIT (layout.NO_JIT), in a transaction of its own on an autocommit
        connection, else in the caller's."""
        own = bool(getattr(conn, "autocommit", False))
        with wrap_driver_errors("summary"), conn.cursor() as cur:
            if own:
                cur.execute("BEGIN")
            try:
                cur.execute(NO_JIT)
                if not self.tallied(conn):
                    rows = [summary_row(r) for r in self._fetch(conn, "summary", _RECENT)]
                else:
                    cur.execute(
                        self.sql["summary_tallied"].replace(RECENT_MARK, self._recent(cur)),
                        _RECENT,
                    )
                    rows = [summary_row(r) for r in rows_as_dicts(cur)]
                # QUEUE_ONE_WRITE's running tasks are 'pendente' rows their group names.
                held = held_running(cur, self.queue_table, self._partitioned)
                return move_held(rows, held)
            finally:
                if own:
                    cur.execute("COMMIT")

    def _recent(self, cur: Any) -> str:
        if not self._partitioned:
            return ""
        return recent_days_pin(
            cur,
            f"SELECT (SELECT (folded_at AT TIME ZONE 'UTC')::date - DATE '1970-01-01'"
            f" - {RECENT_DAYS} FROM {self._values['tally_state_table']} WHERE id = 1),"
            " (clock_timestamp() AT TIME ZONE 'UTC')::date - DATE '1970-01-01' + 1",
        )

    def retry_task(self, conn: Any, task_id: int) -> int | None:
        with wrap_driver_errors("retry_task"), conn.cursor() as cur:
            cur.execute(self.sql["retry_task"], {"id": task_id})
            row = cur.fetchone()
        return None if row is None else int(row[0])
