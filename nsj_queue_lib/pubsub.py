"""Pub/sub: a publication becomes one delivery task per matching subscriber.

A delivery's payload is the envelope ``{"publication": <the publication's
stored payload text>, "subscription": {<the subscriber row>}}`` (as in
nsj-queue-lib 1.2.2), and the delivery carries ``publication_id`` and
``subscriber_id``. Deliveries are inserted in the publication's own
transaction, the one that marks it 'sucesso': all or nothing.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from nsj_queue_lib.dbapi import DBConnection
from nsj_queue_lib.observability.trace_context import capture
from nsj_queue_lib.payload import payload_hash, serialize_payload

if TYPE_CHECKING:
    from nsj_queue_lib.db.queue_store import QueueStore

NO_SUBSCRIBERS_MESSAGE = "No active subscriber for this publication; nothing to deliver."


class PubSubError(Exception):
    """A publication or delivery that cannot be handled as configured."""


def build_envelope(publication_payload: str | None, subscriber: dict[str, Any]) -> dict[str, Any]:
    subscription = dict(subscriber)
    headers = subscription.get("headers")
    if isinstance(headers, str):  # drivers without a JSON type hand back the text
        try:
            subscription["headers"] = json.loads(headers)
        except ValueError:
            pass
    return {"publication": publication_payload, "subscription": subscription}


def parse_envelope(payload: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """The delivery envelope of a task payload, or None when it is not one."""
    envelope: Any
    if isinstance(payload, dict):
        envelope = payload
    else:
        try:
            envelope = json.loads(payload) if payload else None
        except ValueError:
            return None
    if (
        isinstance(envelope, dict)
        and "publication" in envelope
        and isinstance(envelope.get("subscription"), dict)
        and "id" in envelope["subscription"]
    ):
        return envelope
    return None


def publish(store: QueueStore, conn: DBConnection, tarefa: dict[str, Any]) -> str:
    """Fan a publication out to its active matching subscribers, on ``conn`` (its transaction)."""
    if store.subscriber_table is None:
        raise PubSubError(
            f"publication {tarefa['id']}: QUEUE_SUBSCRIBER_TABLE is not configured for queue {store.queue_table}"
        )
    subscribers = store.list_subscribers(
        conn, tarefa["processo"], tarefa["tenant"], tarefa["grupo_empresarial"]
    )
    if not subscribers:
        return NO_SUBSCRIBERS_MESSAGE
    deliveries: list[tuple[Any, str | None, bytes | None]] = []
    for subscriber in subscribers:
        text = serialize_payload(build_envelope(tarefa.get("payload"), subscriber))
        deliveries.append((subscriber["id"], text, payload_hash(text)))
    # Each delivery carries the fan-out's span (the publication's attempt, when the worker
    # traces), else the publication's own trace context.
    trace_context = capture() or tarefa.get("trace_context")
    ids = store.insert_deliveries(conn, {**tarefa, "trace_context": trace_context}, deliveries)
    names = ", ".join(str(s["id"]) for s in subscribers)
    message = f"Published to {len(ids)} subscriber(s): {names}"
    return message if len(message) <= 500 else message[:497] + "..."
