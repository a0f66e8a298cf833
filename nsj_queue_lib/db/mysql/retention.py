"""Retention of a partitioned queue table on MySQL/MariaDB (db/mysql/layout.py).

The purge service's run on such a table keeps its history partitions ``DAYS_AHEAD`` days
ahead of today (an attempt that ends on a day without its partition could not be written)
with one ``ADD PARTITION`` of the weeks missing, and drops each partition once the day
after its last one is older than QUEUE_PURGE_MAX_AGE days: whole, in a fraction of a
second, where the plain layout deletes row by row. So an attempt is kept up to six days
past QUEUE_PURGE_MAX_AGE (the rest of its week); a table made by an earlier release, in
day partitions, keeps its days until they expire and gains weeks at the end.

Both statements take an exclusive metadata lock on the table, which waits for every open
transaction that touched it, and every statement on the table queues behind the waiting
one. So each runs with a short ``lock_wait_timeout`` and is tried a few times; the next run
tries again. Later attempts still waiting whose first attempt is in a dropped partition get
its payload copied first (they read it from the first attempt).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from nsj_queue_lib.db.mysql.errors import ER_LOCK_WAIT_TIMEOUT, error_code, wrap_driver_errors
from nsj_queue_lib.db.mysql.layout import (
    DAYS_AHEAD,
    HOT_DAY,
    partition_clause,
    partition_start,
    partitions_covering,
)
from nsj_queue_lib.identifiers import split_table_name
from nsj_queue_lib.log import get_logger

logger = get_logger("purge")

# Each ADD or DROP PARTITION waits at most this long for its metadata lock, ...
LOCK_WAIT_SECONDS = 2
# ... this many times, this long apart.
ATTEMPTS = 3
RETRY_PAUSE_SECONDS = 0.5
# Fewer days ahead than this at a worker's start: it says so.
SHORT_AHEAD = 2


@dataclasses.dataclass(frozen=True)
class HistoryPartition:
    """A partition of finished attempts, ``p<first>``: a week's, or a day's in a table made
    by an earlier release."""

    name: str
    first: int  # the day its name gives
    rows: int  # as InnoDB estimates them
    # Its rows' finished_day: from the bound of the partition before it to its own.
    days: range


def partitions(conn: Any, steps: dict[str, str], table: str) -> list[HistoryPartition]:
    """The history partitions of ``table``, in order."""
    schema, name = split_table_name(table)
    with conn.cursor() as cur:
        cur.execute(steps["days"], {"schema": schema, "table": name})
        rows = cur.fetchall()
    found = []
    low = HOT_DAY + 1
    for partition, bound, estimated in rows:
        first = str(partition).removeprefix("p")
        if first.isdigit():
            days = range(low, int(bound))
            estimate = max(int(estimated or 0), 0)
            found.append(HistoryPartition(str(partition), int(first), estimate, days))
        low = int(bound)
    return found


def today(conn: Any, steps: dict[str, str]) -> int:
    with conn.cursor() as cur:
        cur.execute(steps["today"])
        return int(cur.fetchone()[0])


def check_days_ahead(conn: Any, steps: dict[str, str], table: str) -> None:
    """Warn when today's partition, or the next ``SHORT_AHEAD`` days', is missing: an
    attempt ending on a day without its partition cannot be written (the purge service
    adds them; it has not run for a long time, or cannot: its user may not ALTER the table)."""
    with wrap_driver_errors("partition check"):
        now = today(conn, steps)
        history = partitions(conn, steps, table)
    end = history[-1].days.stop if history else now
    missing = [day for day in range(now, now + SHORT_AHEAD + 1) if day >= end]
    if missing:
        logger.warning(
            "%s: no partition for day %s (days since 1970-01-01): an attempt that ends then "
            "cannot be written; the purge service adds them (docs/how-to/create-a-queue.md)",
            table,
            ", ".join(str(day) for day in missing),
        )


def rotate(
    conn: Any, steps: dict[str, str], table: str, max_age_days: int, sides: Any = None
) -> int:
    """Weeks ahead added, expired partitions dropped; the rows dropped (estimated). ``conn``
    is idle on return (ALTER TABLE commits). ``sides`` (db/side_store.py): each expired
    partition's side rows cleared before it is dropped; the partitions from one whose
    clearing was cut short (the service stopping) stay for the next run."""
    with wrap_driver_errors("partition retention"):
        now = today(conn, steps)
        history = partitions(conn, steps, table)
        conn.commit()
        end = history[-1].days.stop if history else partition_start(now - 1)
        ahead = partitions_covering(end, now + DAYS_AHEAD)
        if ahead:
            clauses = ", ".join(partition_clause(first, bound) for first, bound in ahead)
            _altered(conn, steps, f"{steps['add']} ({clauses})")
        expired = [p for p in history if p.days.stop <= now - max_age_days]
        cleared = []
        for partition in expired:
            days = {"low": partition.days.start, "bound": partition.days.stop}
            with conn.cursor() as cur:
                cur.execute(steps["keep_payloads"], days)
            conn.commit()
            if sides is not None and not sides.partition(conn, partition.name, partition.days):
                break
            cleared.append(partition)
        if not cleared:
            return 0
        names = [p.name for p in cleared]
        _altered(conn, steps, f"{steps['drop']} {', '.join(names)}")
        dropped = sum(p.rows for p in cleared)
        logger.info("%s: dropped %s (about %d rows)", table, ", ".join(names), dropped)
        return dropped


def _altered(conn: Any, steps: dict[str, str], statement: str) -> None:
    """``statement`` (an ALTER TABLE) with a short metadata lock wait, tried ``ATTEMPTS``
    times; the session's lock_wait_timeout put back."""
    with conn.cursor() as cur:
        cur.execute(steps["lock_wait_of_session"])
        (previous,) = cur.fetchone()
        cur.execute(steps["lock_wait"], {"seconds": LOCK_WAIT_SECONDS})
        try:
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    cur.execute(statement)
                    return
                except Exception as exc:
                    if error_code(exc) != ER_LOCK_WAIT_TIMEOUT or attempt == ATTEMPTS:
                        raise
                    time.sleep(RETRY_PAUSE_SECONDS)
        finally:
            cur.execute(steps["lock_wait"], {"seconds": int(previous)})
