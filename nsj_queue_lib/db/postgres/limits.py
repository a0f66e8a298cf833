"""Per-processo limits on PostgreSQL: the limited claim function's parts and its call.

The BEGIN, the call and the commit travel in one round trip (a pipeline).
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.limited_routine import LimitsDialect
from nsj_queue_lib.db.limits_store import (
    ClaimRequest,
    LimitedClaim,
    LimitsStore,
    outcome,
    rollback_quietly,
    rows,
)
from nsj_queue_lib.model import CLAIMED_COLUMNS, TaskRecord

# The claim functions' task in the claim's shape (the payload of a later attempt from its
# first): the claim function's rows (store.py) and the limited claim's (limits.sql). The
# functions return the whole row: its trace context comes with it.
CALL_COLUMNS = ", ".join(
    "coalesce((f.task).payload, f.first_payload) AS payload" if c == "payload" else f"(f.task).{c}"
    for c in CLAIMED_COLUMNS
)
# The limited claim function's arguments, as in COMMENT ON FUNCTION.
LIMITED_CLAIM_ARGS = "(text[], text[], double precision, boolean, integer, varchar[], varchar)"
# The limited processos' states (db/limited_routine.py says what they mean): ``due_in``, the
# seconds until interval_s and rate_limit allow the next start, and ``capped``.
STATES = (
    "SELECT l.processo,"
    " extract(epoch FROM GREATEST("
    "CASE WHEN l.interval_min_s IS NOT NULL THEN l.next_start_at END,"
    " CASE WHEN l.rate_count IS NOT NULL THEN l.rate_tat END,"
    " CASE WHEN l.breaker_open THEN l.breaker_until END) - clock_timestamp())::float8"
    " AS due_in,"
    " {capped} AS capped"
    " FROM {limits_table} AS l"
    " WHERE (l.time_windows IS NULL"
    " OR md5(l.processo || chr(10) || l.time_windows) = ANY({open}))"
    " AND ({handled} IS NULL OR l.processo = ANY({handled}))"
    " AND {startable}"
    " AND {ready}"
)


def claim(limits: LimitsStore, conn: Any, request: ClaimRequest) -> LimitedClaim:
    """One call of the limited claim function in one round trip; ``request.commit``
    defaults to ``take_lock`` (LimitsStore.claim)."""
    take_lock = request.take_lock
    commit = take_lock if request.commit is None else request.commit
    handled = limits.store.handled_processos
    params = {
        "open": list(request.open_windows),
        "known": list(request.known_windows),
        "early": request.early,
        "take_lock": take_lock,
        "queue_key": limits.store.queue_key,
        "handled_processos": None if handled is None else sorted(handled),
        "worker": limits.store.worker_name,
    }
    with limits.cursor(conn, "limited claim") as cur:
        try:
            with conn.pipeline():
                conn.execute("BEGIN")
                cur.execute(limits.sql["claim"], params)
                if commit:
                    # Kept in the pipeline: committed (and the task's transaction
                    # opened) with no round trip of its own. Nothing claimed leaves an
                    # empty transaction, rolled back below.
                    conn.execute("COMMIT AND CHAIN")
        except BaseException:
            rollback_quietly(conn)
            raise
        row = rows(cur)[0]
    task, locked = None, None
    if row["id"] is not None:
        locked = row.pop("liveness_locked")
        task = TaskRecord.from_row({c: row[c] for c in CLAIMED_COLUMNS})
    else:
        with limits.cursor(conn, "rollback"):
            conn.execute("ROLLBACK")  # the claim's transaction, empty
    return outcome(row, task, locked, take_lock)


LIMITS = LimitsDialect(
    name="postgres",
    now="clock_timestamp()",
    open_windows="open_windows",
    handled_processos="handled_processos",
    states=STATES,
    previous_claim_version="nsj_queue_lib claim 9ac7ae8eeb854147",
    routine_version_params=lambda routine: {"signature": routine + LIMITED_CLAIM_ARGS},
    claim=claim,
    query_values={"call_columns": CALL_COLUMNS},
)
