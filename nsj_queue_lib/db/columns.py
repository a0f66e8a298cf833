"""Column lists every dialect's queries select, built from the contract's columns."""

from __future__ import annotations

from nsj_queue_lib import model

# A later attempt keeps no payload of its own: it is read from the first
# attempt, joined as ``first_attempt``.
_RESOLVED_PAYLOAD = "COALESCE(t.payload, first_attempt.payload) AS payload"

TASK_COLUMNS = ", ".join(f"t.{c}" for c in model.QUEUE_COLUMNS)
TASK_COLUMNS_RESOLVED = ", ".join(
    _RESOLVED_PAYLOAD if c == "payload" else f"t.{c}" for c in model.QUEUE_COLUMNS
)
SUBSCRIBER_COLUMNS = ", ".join(f"s.{c}" for c in model.SUBSCRIBER_COLUMNS)
