"""Tasks a worker cannot handle are left to the workers that can: pub/sub deliveries of
subscribers it has no method for, and tasks of processos it has no handler for.

A delivery row (and its retries and dead letter) carries its ``subscriber_id``;
any other row has none. The claim takes a delivery only when its subscriber is
among the worker's handled ones (``WorkerBase.handled_subscribers``: the ids of
its ``@Subscriber``/``@DeadSubscriber`` methods; None means every subscriber,
a pub/sub worker that delivers the others by webhook). So a worker without a
method for a subscriber never claims and fails that subscriber's deliveries:
they stay ``pendente`` for a worker that handles them.

The condition reads only the candidate row the claim reads anyway (no probe),
and for a task that is not a delivery it is one NULL test. Each dialect spells
it (``db/<dialect>/deliveries.py``) over the handled ids, sent as a parameter
encoded here: an array on PostgreSQL, a JSON array text on MySQL (NULL: every
subscriber). A worker's processos are passed the same way (issue 37): those of
its @Task methods, or every processo (NULL) when it overrides execute. Dead
letters carry their task's processo, so they go to a worker that handles it too.
"""

from __future__ import annotations

import json
from collections.abc import Collection


def postgres_array(handled: Collection[str] | None) -> str | None:
    """``handled`` as a PostgreSQL array literal (a parameter sent as text), None as NULL."""
    if handled is None:
        return None
    quoted = ('"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"' for s in sorted(handled))
    return "{" + ",".join(quoted) + "}"


def json_array(handled: Collection[str] | None) -> str | None:
    """``handled`` as a JSON array text (MySQL's parameter), None as NULL."""
    return None if handled is None else json.dumps(sorted(handled))
