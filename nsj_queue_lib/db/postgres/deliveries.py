"""Which tasks a PostgreSQL claim leaves to other workers (flow/deliveries.py): the handled
subscribers and processos are arrays."""

from __future__ import annotations

from nsj_queue_lib.db.conditions import Deliverable

deliverable = Deliverable(
    subscriber=(
        "({row}.subscriber_id IS NULL OR {handled} IS NULL OR {row}.subscriber_id = ANY({handled}))"
    ),
    processo="({processos} IS NULL OR {row}.processo = ANY({processos}))",
)
# The socket-server claims' condition (queries.sql), over their parameters.
SERVER_DELIVERABLE = deliverable(
    "t", "%(handled_subscribers)s::varchar[]", "%(handled_processos)s::varchar[]"
)
