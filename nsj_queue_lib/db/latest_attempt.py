"""A task's latest attempt under a row lock without locking a gap (MySQL/MariaDB).

``cancel_task``, ``send_event`` and a child's ``after=`` lock the latest attempt of a task
until the caller's commit, and must see attempts committed after the caller's snapshot
(REPEATABLE READ), so they read with locking reads. On InnoDB a locking read that searches
a key which is not unique (``id_inicial``; ``id`` alone on the partitioned layout, whose
key is ``(id, finished_day)``) also locks the gap after its last match, and for the newest
task that gap is where every insert goes: another session's ``insert_task`` waited for the
caller's commit, up to the lock wait timeout.

So: a consistent read names the attempt the snapshot sees as latest, with its partition
key; a locking read of that row by its whole key takes a record lock alone and reads the
row's latest committed version. Unless that version says a newer attempt exists
(``reenfileirado``: set in the transaction that inserts the next attempt) or the row moved
partition since, it is the latest, and stays so while it is locked (a retry updates it
first). Otherwise (a snapshot older than the change) the searching locking reads find the
latest attempt as before, gap locks and all. The statements are the dialect's
``by_task_id.sql`` (MySQL's alone: PostgreSQL locks rows, never gaps).
"""

from __future__ import annotations

import functools
from typing import Any

from nsj_queue_lib.db.columns import TASK_VIEW_COLUMNS
from nsj_queue_lib.db.sql_files import render_queries

FOR_UPDATE, FOR_SHARE = "FOR UPDATE", "LOCK IN SHARE MODE"
# What callers read of the attempt: the task's view (cancel_task), and what a parent's
# state needs besides (after=, send_event).
VIEW = TASK_VIEW_COLUMNS
STATE = f"{TASK_VIEW_COLUMNS}, t.estouro_tentativas, t.dead"
# The partitioned layout's key of the unfinished attempts (db/<dialect>/layout.py: 1).
PARTITION_KEY = "t.finished_day"


@functools.lru_cache(maxsize=256)
def _statements(
    dialect: str, queue_table: str, partitioned: bool, lock: str, columns: str
) -> dict[str, str]:
    values = {
        "queue_table": queue_table,
        "columns": columns,
        "lock": lock,
        "day_of_t": PARTITION_KEY if partitioned else "NULL",
        "at_day": f"{PARTITION_KEY} = %(day)s AND " if partitioned else "",
    }
    return render_queries(dialect, values, "by_task_id.sql")


def lock_latest(
    cur: Any,
    dialect: str,
    queue_table: str,
    partitioned: bool,
    task_id: int,
    columns: str = STATE,
    lock: str = FOR_UPDATE,
) -> dict[str, Any] | None:
    """The latest attempt of the task ``task_id`` belongs to (``columns``, as the driver
    gives them), locked; None for an unknown id."""
    sql = _statements(dialect, queue_table, partitioned, lock, columns)
    cur.execute(sql["latest_seen"], {"id": task_id})
    seen = cur.fetchone()
    if seen is not None:
        cur.execute(sql["latest_row"], {"id": seen[0], "day": seen[1]})
        row = _one(cur)
        if row is not None and not row["reenfileirado"]:
            return row
    cur.execute(sql["searched_first"], {"id": task_id})
    first = cur.fetchone()
    if first is None:
        return None
    cur.execute(sql["searched_latest"], {"first": first[0]})
    latest = cur.fetchone()[0]
    cur.execute(sql["searched_row"], {"id": first[0] if latest is None else latest})
    return _one(cur)


def _one(cur: Any) -> dict[str, Any] | None:
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip((column[0] for column in cur.description), row, strict=True))
