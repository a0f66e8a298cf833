"""Which tasks a MySQL/MariaDB (and SingleStore) claim leaves to other workers
(flow/deliveries.py): the handled subscribers and processos are JSON arrays."""

from __future__ import annotations

from nsj_queue_lib.db.conditions import Deliverable

deliverable = Deliverable(
    subscriber=(
        "({row}.subscriber_id IS NULL OR {handled} IS NULL"
        " OR JSON_CONTAINS({handled}, JSON_QUOTE({row}.subscriber_id)))"
    ),
    processo="({processos} IS NULL OR JSON_CONTAINS({processos}, JSON_QUOTE({row}.processo)))",
)
# The socket-server claims' condition (queries.sql), over their parameters.
SERVER_DELIVERABLE = deliverable("t", "%(handled_subscribers)s", "%(handled_processos)s")
