"""What nsjq status, the console and /metrics count of QUEUE_ONE_WRITE's groups
(db/postgres/held_groups.py): their running tasks are 'pendente' rows a group row names. No
driver import: the inspection store serves psycopg 2 and 3 connections alike, and nsjq's
start-up stays short."""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.dialect import groups_table_name
from nsj_queue_lib.db.postgres.layout import HOT_DAY
from nsj_queue_lib.db.postgres.rows import rows_as_dicts


def _groups_table(cur: Any, queue_table: str) -> str | None:
    """The queue's groups table, None where it has none (a schema before db_gen --upgrade)."""
    table = groups_table_name(queue_table)
    cur.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
    row = cur.fetchone()
    return table if row and row[0] else None


def _held(groups: str, queue_table: str, partitioned: bool) -> str:
    """The held attempts: 'pendente' rows a group row names, each with its latest group
    (a task given back unstarted and claimed by another group is named by both until the
    first one's commit)."""
    hot = f"t.finished_day = {HOT_DAY} AND " if partitioned else ""
    return (
        f"FROM {groups} AS g CROSS JOIN LATERAL unnest(g.task_ids) AS held(id) "
        f"JOIN {queue_table} AS t ON {hot}t.id = held.id "
        "WHERE t.status = 'pendente' ORDER BY t.id DESC, g.started_at DESC"
    )


def held_running(cur: Any, queue_table: str, partitioned: bool) -> dict[str | None, int]:
    """How many tasks held groups are running, by processo (nsjq status counts them as
    running). Empty where the queue has no groups table."""
    return _held_counts(cur, queue_table, partitioned, "t.processo")


def held_by_worker(cur: Any, queue_table: str, partitioned: bool) -> dict[str | None, int]:
    """How many tasks each worker's held groups run, by the worker's name."""
    return _held_counts(cur, queue_table, partitioned, "g.worker")


def _held_counts(cur: Any, queue_table: str, partitioned: bool, by: str) -> dict[str | None, int]:
    """The held attempts counted by ``by`` (a column of the task, t, or of its group, g)."""
    groups = _groups_table(cur, queue_table)
    if groups is None:
        return {}
    cur.execute(
        f"SELECT h.key, count(*) FROM (SELECT DISTINCT ON (t.id) {by} AS key "
        f"{_held(groups, queue_table, partitioned)}) AS h GROUP BY h.key"
    )
    return {key: int(count) for key, count in cur.fetchall()}


def held_attempts(
    cur: Any, queue_table: str, partitioned: bool, columns: str, limit: int
) -> list[dict[str, Any]]:
    """The running held attempts as ``list_running`` gives attempts (``columns``: its select
    list, alias t), the most recent first, at most ``limit``: their worker and started_at,
    which their rows get at their outcome's write, are their group's."""
    groups = _groups_table(cur, queue_table)
    if groups is None:
        return []
    cur.execute(
        f"SELECT DISTINCT ON (t.id) {columns}, "
        "extract(epoch FROM clock_timestamp() - t.data_hora)::float8 AS age_seconds, "
        "g.worker AS held_by, g.started_at AS held_since "
        f"{_held(groups, queue_table, partitioned)} LIMIT %s",
        (limit,),
    )
    rows = rows_as_dicts(cur)
    for row in rows:
        row["worker"] = row.pop("held_by")
        row["started_at"] = row.pop("held_since")
    return rows


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
