"""Retention of a partitioned queue table (PostgreSQL; db/postgres/layout.py).

The purge service's run on such a table keeps ``DAYS_AHEAD`` day partitions ahead of
today (an attempt that ends on a day without its partition could not be written), and
drops each day partition once the day after it is older than QUEUE_PURGE_MAX_AGE days:
whole, in milliseconds, where the plain layout deletes row by row.

Both take the least lock PostgreSQL allows next to running workers. A day is created as a
table of its own, then attached (SHARE UPDATE EXCLUSIVE on the queue table: enqueues,
claims and settles go on); ``CREATE TABLE ... PARTITION OF`` would wait for every open
handler transaction while the statements behind it wait for it. A day is detached
CONCURRENTLY, outside any transaction, which waits for the transactions that may read it
without blocking anyone, then dropped. Later attempts still waiting whose first attempt
is in a dropped day get their payload copied first (they read it from the first attempt).
"""

from __future__ import annotations

import re
from typing import Any

import psycopg

from nsj_queue_lib.db.postgres.errors import wrap_driver_errors
from nsj_queue_lib.db.postgres.layout import DAYS_AHEAD, HOT_DAY, day_partition
from nsj_queue_lib.log import get_logger

logger = get_logger("purge")

TODAY = "SELECT (clock_timestamp() AT TIME ZONE 'UTC')::date - DATE '1970-01-01'"
# The queue table's partitions with their ranges (FOR VALUES FROM (d) TO (d + 1)).
PARTITIONS = """
SELECT c.oid::regclass::text, pg_get_expr(c.relpartbound, c.oid), c.reltuples::bigint
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = %(table)s::regclass
"""
_RANGE = re.compile(r"FROM \((\d+)\) TO \((\d+)\)")
# A day's attach and the copy before a drop give up quickly: the next run tries again.
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '2s'"
# The legacy partition's rows, as its purge index (indexes.sql) states them.
FINISHED = "status NOT IN ('pendente', 'agendada', 'processando', 'aguardando')"
# The legacy partition's rows' finished_day (migration.py adds the column with it).
LEGACY_DAY = 0
# Fewer days ahead than this at a worker's start: it says so.
SHORT_AHEAD = 2


def days(conn: Any, table: str) -> dict[int, tuple[str, int]]:
    """The day partitions of ``table``: {day: (partition, estimated rows)}."""
    found = {}
    for name, bound, rows in conn.execute(PARTITIONS, {"table": table}).fetchall():
        matched = _RANGE.search(bound or "")
        if matched and int(matched.group(1)) > HOT_DAY:
            found[int(matched.group(1))] = (name, max(int(rows), 0))
    return found


def check_days_ahead(conn: Any, table: str) -> None:
    """Warn when today's partition, or the next ``SHORT_AHEAD`` days', is missing: an
    attempt ending on a day without its partition cannot be written (the purge service
    adds them; it has not run for a long time, or cannot: its user does not own the
    table)."""
    with wrap_driver_errors("partition check"):
        today = int(conn.execute(TODAY).fetchone()[0])
        existing = days(conn, table)
    missing = [day for day in range(today, today + SHORT_AHEAD + 1) if day not in existing]
    if missing:
        logger.warning(
            "%s: no partition for day %s (days since 1970-01-01): an attempt that ends then "
            "cannot be written; the purge service adds them (docs/how-to/create-a-queue.md)",
            table,
            ", ".join(str(day) for day in missing),
        )


def rotate(conn: Any, table: str, max_age_days: int, limit: int = 1000, sides: Any = None) -> int:
    """Days ahead attached, expired days dropped, and a round of the legacy partition's
    expired rows deleted; the rows dropped (estimated). ``conn`` is idle on return (the
    detach runs outside any transaction). ``sides`` (db/side_store.py): each expired day's
    side rows cleared before it is dropped; a day whose clearing was cut short (the
    service stopping) stays for the next run."""
    with wrap_driver_errors("partition retention"):
        legacy = _legacy_partition(conn, table)
        purged = _purge_legacy(conn, table, legacy, max_age_days, limit, sides) if legacy else 0
        today = int(conn.execute(TODAY).fetchone()[0])
        existing = days(conn, table)
        conn.commit()
        _attach_missing(conn, table, today, existing)
        dropped = 0
        for day, (name, rows) in sorted(existing.items()):
            if day + 1 <= today - max_age_days:
                _keep_payloads(conn, table, name)
                if sides is not None and not sides.partition(conn, name, range(day, day + 1)):
                    break
                _drop(conn, table, name)
                dropped += rows
                logger.info("%s: dropped %s (day %d, about %d rows)", table, name, day, rows)
        # No ANALYZE of the partitioned table here: on PostgreSQL 15 it analyzes every
        # partition too, 48 s at 60 days of 10M rows, every day. Each partition keeps its
        # own statistics (autovacuum's insert threshold for the days, the vacuum service for
        # the hot one), which is what the pinned statements of the library plan with; the
        # whole table's, for BI's joins over it, are an operator's ANALYZE
        # (docs/how-to/partition-a-queue.md).
        return dropped + purged


def _legacy_partition(conn: Any, table: str) -> str | None:
    """The partition of a migrated table's history (db/postgres/migration.py), if any."""
    for name, bound, _rows in conn.execute(PARTITIONS, {"table": table}).fetchall():
        if "MINVALUE" in (bound or ""):
            return str(name)
    return None


def _purge_legacy(
    conn: Any, table: str, legacy: str, max_age_days: int, limit: int, sides: Any = None
) -> int:
    """The legacy partition leaves on the plain layout's schedule: its expired rows in
    bounded rounds, and the partition itself, whole, once its newest row expired. Later
    attempts still waiting get their first attempt's payload first."""
    _keep_payloads(conn, table, legacy)
    newest = conn.execute(
        f"SELECT max(data_hora) < statement_timestamp() - make_interval(days => %s), "
        f"count(*) = 0 FROM (SELECT data_hora FROM {legacy} WHERE {FINISHED} "
        f"ORDER BY data_hora DESC LIMIT 1) AS n",
        (max_age_days,),
    ).fetchone()
    conn.commit()
    if newest[0] or newest[1]:
        # Its rows all carry the key the migration gave them (migration.py: 0).
        if sides is not None and not sides.partition(
            conn, legacy, range(LEGACY_DAY, LEGACY_DAY + 1)
        ):
            return 0
        _drop(conn, table, legacy)
        logger.info("%s: dropped %s, the history from before its migration", table, legacy)
        return 0
    tasks = conn.execute(
        f"DELETE FROM {legacy} WHERE id IN (SELECT id FROM {legacy} WHERE {FINISHED} "
        f"AND data_hora < statement_timestamp() - make_interval(days => %s) "
        f"ORDER BY data_hora LIMIT %s FOR UPDATE SKIP LOCKED) "
        f"RETURNING coalesce(id_inicial, id)",
        (max_age_days, limit),
    ).fetchall()
    if sides is not None and tasks:
        sides.tasks(conn, [row[0] for row in tasks])
    conn.commit()
    return len(tasks)


def attach_days_ahead(conn: Any, table: str) -> None:
    """Yesterday to ``DAYS_AHEAD`` days ahead, those missing attached."""
    with wrap_driver_errors("partitions ahead"):
        today = int(conn.execute(TODAY).fetchone()[0])
        existing = days(conn, table)
        conn.commit()
        _attach_missing(conn, table, today, existing)


def _attach_missing(conn: Any, table: str, today: int, existing: dict) -> int:
    missing = [day for day in range(today - 1, today + DAYS_AHEAD + 1) if day not in existing]
    for day in missing:
        _attach(conn, table, day)
    return len(missing)


def _attach(conn: Any, table: str, day: int) -> None:
    name = day_partition(table, day)
    conn.execute(LOCK_TIMEOUT)
    # Empty, with the queue table's columns and defaults; the attach adds its indexes
    # (the queue table's, on an empty table) and its triggers.
    conn.execute(f"CREATE TABLE IF NOT EXISTS {name} (LIKE {table} INCLUDING DEFAULTS)")
    conn.execute(
        f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM ({day}) TO ({day + 1})"
    )
    conn.commit()


def _keep_payloads(conn: Any, table: str, partition: str) -> None:
    """Later attempts still waiting keep their first attempt's payload, about to go."""
    conn.execute(LOCK_TIMEOUT)
    conn.execute(
        f"UPDATE {table} AS a SET payload = f.payload FROM {partition} AS f "
        f"WHERE a.finished_day = {HOT_DAY} AND a.id_inicial = f.id AND a.payload IS NULL"
    )
    conn.commit()


def _drop(conn: Any, table: str, partition: str) -> None:
    was_autocommit, conn.autocommit = conn.autocommit, True
    try:
        try:
            conn.execute(f"ALTER TABLE {table} DETACH PARTITION {partition} CONCURRENTLY")
        except psycopg.errors.ObjectNotInPrerequisiteState:
            # An earlier detach was interrupted (its worker stopped): it ends here.
            conn.execute(f"ALTER TABLE {table} DETACH PARTITION {partition} FINALIZE")
        conn.execute(f"DROP TABLE {partition}")
    finally:
        conn.autocommit = was_autocommit
