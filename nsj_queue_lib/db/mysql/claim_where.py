"""The claim procedure's WHERE (claim_procedure.sql), one text for its three locking reads.

A task is claimable when it is ready ('pendente', due), its lock_key is free
(db/mysql/lock_keys.py), this worker handles its deliveries
(db/mysql/deliveries.py) and its processo has no limits (db/conditions.py). The
batch claim and the one-by-one claim read from the session's position
(v_prioridade, v_data_hora, v_id: claim order is prioridade DESC, data_hora,
id) on; the claim without a claim index reads all. The position comes before
the subqueries: the cheap test first.
"""

from __future__ import annotations

from nsj_queue_lib.db.conditions import limits_free
from nsj_queue_lib.db.mysql.deliveries import deliverable
from nsj_queue_lib.db.mysql.lock_keys import lock_key_free

# The clock paused_until is compared with: it is a UTC DATETIME (limits_table.sql says
# why), and NOW(6) is in the session's time zone (a worker's is UTC; a handler may change
# its own connection's, on which the next claim runs).
PAUSE_CLOCK = "UTC_TIMESTAMP(6)"

_READY = "t.status = 'pendente' AND t.data_hora <= {now}"
_AFTER_POSITION = (
    "(t.prioridade < v_prioridade OR t.prioridade IS NULL"
    " OR (t.prioridade = v_prioridade"
    " AND (t.data_hora > v_data_hora OR (t.data_hora = v_data_hora AND t.id >= v_id))))"
)


def claim_where(
    table: str, limits_table: str, after_position: bool, hot_day: int | None = None
) -> str:
    """The condition on the candidate ``t`` of ``table`` (identifiers of this library);
    ``hot_day``: the partition key of unfinished rows on a partitioned table, which the
    candidate and the lock_key probes are pinned to (db/mysql/layout.py)."""
    now = "NOW(6)"
    pin = "" if hot_day is None else f"t.finished_day = {int(hot_day)} AND "
    conditions = [pin + _READY.format(now=now)]
    if after_position:
        conditions.append(_AFTER_POSITION)
    conditions += [
        lock_key_free(table, "t", now, hot_day),
        deliverable("t", "p_handled_subscribers", "p_handled_processos"),
        limits_free(limits_table, "t", PAUSE_CLOCK),
    ]
    return "\n      AND ".join(conditions)
