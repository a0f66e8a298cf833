"""Per-processo limits on MySQL/MariaDB: the limited claim procedure's parts and its call.

The CALL commits itself; the claimed task comes back as JSON (db/mysql/rows.py).
"""

from __future__ import annotations

import json
from typing import Any

from nsj_queue_lib.db import limits_store
from nsj_queue_lib.db.limits_store import ClaimRequest, LimitedClaim, LimitsStore
from nsj_queue_lib.db.mysql.rows import task_from_json
from nsj_queue_lib.flow.deliveries import json_array
from nsj_queue_lib.identifiers import split_table_name
from nsj_queue_lib.model import TaskRecord

# The limited processos' states (db/limited_routine.py says what they mean): ``due_in``, the
# seconds until interval_s and rate_limit allow the next start, and ``capped``.
STATES = (
    "SELECT l.processo,"
    " NULLIF(GREATEST("
    "IF(l.interval_min_s IS NULL OR l.next_start_at IS NULL, -1e18,"
    " TIMESTAMPDIFF(MICROSECOND, NOW(6), l.next_start_at)),"
    " IF(l.rate_count IS NULL OR l.rate_tat IS NULL, -1e18,"
    " TIMESTAMPDIFF(MICROSECOND, NOW(6), l.rate_tat)),"
    " IF(NOT l.breaker_open OR l.breaker_until IS NULL, -1e18,"
    " TIMESTAMPDIFF(MICROSECOND, NOW(6), l.breaker_until))), -1e18) / 1e6 AS due_in,"
    " {capped} AS capped"
    " FROM {limits_table} AS l"
    " WHERE (l.time_windows IS NULL"
    " OR JSON_CONTAINS({open}, JSON_QUOTE(MD5(CONCAT(l.processo, CHAR(10), l.time_windows)))))"
    " AND ({handled} IS NULL OR JSON_CONTAINS({handled}, JSON_QUOTE(l.processo)))"
    " AND {startable}"
    " AND {ready}"
)


def routine_version_params(routine: str) -> dict[str, Any]:
    """``routine_version``'s parameters (limits.sql): the procedure's schema and name."""
    schema, name = split_table_name(routine)
    return {"schema": schema, "name": name}


def claim(limits: LimitsStore, conn: Any, request: ClaimRequest) -> LimitedClaim:
    """One CALL of the limited claim procedure, which commits the claim (whatever
    ``request.commit`` says)."""
    params = {
        "open": json.dumps(list(request.open_windows)),
        "known": json.dumps(list(request.known_windows)),
        "early": request.early,
        "take_lock": request.take_lock,
        "prefix": limits.store.lock_prefix(conn),
        "handled_processos": json_array(limits.store.handled_processos),
        "worker": limits.store.worker_name,
    }
    with limits.cursor(conn, "limited claim") as cur:
        try:
            cur.execute(limits.sql["claim"], params)
            row = limits_store.rows(cur)[0]
            while cur.nextset():  # the CALL's own status comes last
                pass
        except BaseException:
            limits_store.rollback_quietly(conn)
            raise
    task, locked = None, None
    if row["task"] is not None:
        found = task_from_json(row["task"])
        got = found.pop("liveness_locked")
        locked = None if got is None else got == 1
        task = TaskRecord.from_row(found)
    return limits_store.outcome(row, task, locked, request.take_lock)
