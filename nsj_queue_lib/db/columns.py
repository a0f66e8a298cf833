"""Column lists every dialect's queries select, built from the contract's columns."""

from __future__ import annotations

from nsj_queue_lib import model
from nsj_queue_lib.db.conditions import limits_free, lock_key_free
from nsj_queue_lib.db.dialect import limits_table_name, workers_table_name

# A later attempt keeps no payload of its own: it is read from the first
# attempt, joined as ``first_attempt``.
_RESOLVED_PAYLOAD = "COALESCE(t.payload, first_attempt.payload) AS payload"

TASK_COLUMNS = ", ".join(f"t.{c}" for c in model.QUEUE_COLUMNS)
TASK_COLUMNS_RESOLVED = ", ".join(
    _RESOLVED_PAYLOAD if c == "payload" else f"t.{c}" for c in model.QUEUE_COLUMNS
)
# A claimed task: the contract's columns and its trace context (model.CLAIMED_COLUMNS).
CLAIMED_COLUMNS = ", ".join(f"t.{c}" for c in model.CLAIMED_COLUMNS)
CLAIMED_COLUMNS_RESOLVED = ", ".join(
    _RESOLVED_PAYLOAD if c == "payload" else f"t.{c}" for c in model.CLAIMED_COLUMNS
)
SUBSCRIBER_COLUMNS = ", ".join(f"s.{c}" for c in model.SUBSCRIBER_COLUMNS)
# A task as its user sees it (its latest attempt ``t``): QueueClient.get_task.
TASK_VIEW_COLUMNS = ", ".join(
    [
        "t.id",
        "COALESCE(t.id_inicial, t.id) AS id_inicial",
        "t.status",
        "t.tentativa",
        "t.mensagem",
        "t.reenfileirado",
        *(f"t.{c}" for c in model.LIFECYCLE_COLUMNS),
    ]
)
# What an insert sends of a task (the client's checked row), besides its time
# and priority, whose defaults each dialect writes its own way.
TASK_INSERT_FIELDS = (
    "origem",
    "destino",
    "processo",
    "chave_externa",
    "payload",
    "payload_hash",
    "tenant",
    "grupo_empresarial",
    "pub_sub",
)


# The placeholders of a bulk insert's traced rendering: one trace context for the call.
TRACED_INSERT = {"trace_column": ", trace_context", "trace_value": ", %(trace_context)s"}


def query_values(
    queue_table: str,
    subscriber_table: str | None,
    now: str,
    deliverable: str,
    pause_clock: str | None = None,
) -> dict[str, str]:
    """The placeholders every dialect's named queries use (identifiers already checked):
    ``now``, the dialect's clock; ``deliverable``, its socket-server claims' condition on the
    deliveries and processos the claiming worker handles (``db/<dialect>/deliveries.py``)."""
    return {
        "queue_table": queue_table,
        # The subscriber queries are only run when a table was given.
        "subscriber_table": subscriber_table or "subscriber_table_not_configured",
        "task_columns": TASK_COLUMNS,
        "task_columns_resolved": TASK_COLUMNS_RESOLVED,
        "claimed_columns": CLAIMED_COLUMNS,
        "claimed_columns_resolved": CLAIMED_COLUMNS_RESOLVED,
        # A bulk insert's trace context: none here; the stores render a traced variant
        # with TRACED_INSERT (observability/trace_context.py says what is stored).
        "trace_column": "",
        "trace_value": "",
        "subscriber_columns": SUBSCRIBER_COLUMNS,
        "task_view_columns": TASK_VIEW_COLUMNS,
        "lifecycle_columns": ", ".join(model.EXTRA_COLUMNS),
        # The socket-server claims' lock_key condition, on the candidate row t.
        "lock_key_free": lock_key_free(queue_table, "t", now),
        # ... and which deliveries the claiming worker handles (flow/deliveries.py).
        "deliverable": deliverable,
        # Tasks of limited processos are left to the limited claim (flow/limits.py).
        "limits_free": limits_free(limits_table_name(queue_table), "t", pause_clock or now),
        "limits_table": limits_table_name(queue_table),
        "workers_table": workers_table_name(queue_table),
    }
