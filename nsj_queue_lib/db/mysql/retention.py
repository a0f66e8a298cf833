"""Retention of a partitioned queue table on MySQL/MariaDB (db/mysql/layout.py).

The purge service's run on such a table keeps ``DAYS_AHEAD`` day partitions ahead of
today (an attempt that ends on a day without its partition could not be written) with one
``ADD PARTITION`` of every missing day, and drops each day partition once the day after it
is older than QUEUE_PURGE_MAX_AGE days: whole, in a fraction of a second, where the plain
layout deletes row by row.

Both statements take an exclusive metadata lock on the table, which waits for every open
transaction that touched it, and every statement on the table queues behind the waiting
one. So each runs with a short ``lock_wait_timeout`` and is tried a few times; the next run
tries again. Later attempts still waiting whose first attempt is in a dropped day get its
payload copied first (they read it from the first attempt).
"""

from __future__ import annotations

import time
from typing import Any

from nsj_queue_lib.db.mysql.errors import ER_LOCK_WAIT_TIMEOUT, error_code, wrap_driver_errors
from nsj_queue_lib.db.mysql.layout import DAYS_AHEAD, day_partition
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


def days(conn: Any, steps: dict[str, str], table: str) -> dict[int, tuple[str, int]]:
    """The day partitions of ``table``: {day: (partition, estimated rows)}."""
    schema, name = split_table_name(table)
    with conn.cursor() as cur:
        cur.execute(steps["days"], {"schema": schema, "table": name})
        rows = cur.fetchall()
    found = {}
    for partition, bound, estimated in rows:
        if str(partition) == day_partition(int(bound) - 1):
            found[int(bound) - 1] = (str(partition), max(int(estimated or 0), 0))
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
        existing = days(conn, steps, table)
    missing = [day for day in range(now, now + SHORT_AHEAD + 1) if day not in existing]
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
    """Days ahead added, expired days dropped; the rows dropped (estimated). ``conn`` is idle
    on return (ALTER TABLE commits). ``sides`` (db/side_store.py): each expired day's side
    rows cleared before it is dropped; the days from one whose clearing was cut short (the
    service stopping) stay for the next run."""
    with wrap_driver_errors("partition retention"):
        now = today(conn, steps)
        existing = days(conn, steps, table)
        conn.commit()
        last = max(existing, default=now - 2)
        ahead = list(range(max(last + 1, now - 1), now + DAYS_AHEAD + 1))
        if ahead:
            partitions = ", ".join(
                f"PARTITION {day_partition(day)} VALUES LESS THAN ({day + 1})" for day in ahead
            )
            _altered(conn, steps, f"{steps['add']} ({partitions})")
        expired = [day for day in sorted(existing) if day + 1 <= now - max_age_days]
        if not expired:
            return 0
        cleared = []
        for day in expired:
            with conn.cursor() as cur:
                cur.execute(steps["keep_payloads"], {"day": day})
            conn.commit()
            if sides is not None and not sides.partition(conn, existing[day][0], day):
                break
            cleared.append(day)
        if not cleared:
            return 0
        expired = cleared
        names = [existing[day][0] for day in expired]
        _altered(conn, steps, f"{steps['drop']} {', '.join(names)}")
        dropped = sum(existing[day][1] for day in expired)
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
