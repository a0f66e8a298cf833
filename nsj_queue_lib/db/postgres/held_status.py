"""What nsjq status, the console and /metrics count of QUEUE_ONE_WRITE's groups
(db/postgres/held_groups.py): their running tasks are 'pendente' rows a group row names. No
driver import: the inspection store serves psycopg 2 and 3 connections alike, and nsjq's
start-up stays short."""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.dialect import groups_table_name
from nsj_queue_lib.db.postgres.layout import HOT_DAY


def held_running(cur: Any, queue_table: str, partitioned: bool) -> dict[str | None, int]:
    """How many tasks held groups are running, by processo: 'pendente' rows that a group
    row names (nsjq status counts them as running). Empty where the queue has no groups
    table (a schema before db_gen --upgrade)."""
    table = groups_table_name(queue_table)
    cur.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
    row = cur.fetchone()
    if not row or not row[0]:
        return {}
    hot = f"t.finished_day = {HOT_DAY} AND " if partitioned else ""
    cur.execute(
        f"SELECT t.processo, count(*) FROM {queue_table} AS t "
        f"WHERE {hot}t.id IN (SELECT unnest(g.task_ids) FROM {table} AS g) "
        "AND t.status = 'pendente' GROUP BY t.processo"
    )
    return {processo: int(count) for processo, count in cur.fetchall()}


# The other columns of a new running row, by the rows' kind (db/inspection.py).
SUMMARY_BLANK: dict[str, Any] = {"oldest_ready_seconds": None, "failed_24h": 0, "dead_24h": 0}
DEPTH_BLANK: dict[str, Any] = {"oldest_ready_seconds": None}


def move_held(
    rows: list[dict[str, Any]],
    held: dict[str | None, int],
    blank: dict[str, Any] = SUMMARY_BLANK,
) -> list[dict[str, Any]]:
    """``summary`` (or ``depth``, with ``DEPTH_BLANK``) rows with the held running tasks
    counted 'processando', not 'pendente'."""
    if not held:
        return rows
    by_key = {(r["processo"], r["status"]): r for r in rows}
    for processo, count in held.items():
        ready = by_key.get((processo, "pendente"))
        if ready is not None:
            ready["tasks"] = max(0, ready["tasks"] - count)
        running = by_key.get((processo, "processando"))
        if running is None:
            running = {"processo": processo, "status": "processando", "tasks": 0, **blank}
            rows.append(running)
            by_key[(processo, "processando")] = running
        running["tasks"] += count
    return rows
