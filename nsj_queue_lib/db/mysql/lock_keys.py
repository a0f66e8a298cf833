"""lock_key's condition in MySQL/MariaDB's claims: db/conditions.py's, another spelling.

The same two probes of a keyed candidate (is a task of its key running, is it
the first ready task of its key in claim order), on the same index
(``idx_<queue>_lock_key``). Only the first is written as a scalar subquery
instead of ``NOT EXISTS``: MariaDB 10.11 did not run that ``NOT EXISTS`` as a
probe of one index entry per candidate, but as a scan, about 330
``Handler_read_next`` and 370 ``Handler_read_rnd_next`` per claimed task in
a drain of 100 keys (a ``LIMIT 1`` inside it changed nothing). The scalar
subquery reads one index entry, as the candidate's unkeyed neighbours cost:
keyed claims then did no row reads beyond ``Handler_read_key``.

Both probes read a keyed row's status from ``lock_key_status`` (the status of
a keyed row, NULL on an unkeyed one), which the index holds instead of
``status``: a status change of an unkeyed task leaves that index alone.
"""

from __future__ import annotations

from nsj_queue_lib.db import conditions

_KEY_IDLE = (
    "(SELECT held.id FROM {table} AS held"
    " WHERE {held_hot}held.lock_key = {row}.lock_key AND held.lock_key_status = 'processando' LIMIT 1) IS NULL"
)


def lock_key_free(table: str, row: str, now: str, hot_day: int | None = None) -> str:
    """SQL: the candidate ``row`` of ``table`` is not held back by its lock_key (all
    arguments are identifiers or expressions of this library, never user input); ``hot_day``:
    the probes pinned to the unfinished rows' partition (db/mysql/layout.py)."""
    return conditions.lock_key_free(
        table, row, now, key_idle=_KEY_IDLE, keyed_status="lock_key_status", hot_day=hot_day
    )
