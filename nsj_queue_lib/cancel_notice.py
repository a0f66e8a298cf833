"""The ``cancel:<id>`` notification: a running attempt was asked to stop.

Sent by ``QueueClient.cancel_task`` with ``pg_notify`` on PostgreSQL, pushed by
the socket server where the database cannot notify, and read by a worker's
dispatcher among its wake-ups. Kept apart from ``notify`` (the worker's wake-up
mechanisms), which the socket server must not import.
"""

from __future__ import annotations

CANCEL_PREFIX = "cancel:"  # "cancel:<attempt id>": that running attempt is asked to stop


def cancel_payload(attempt_id: int) -> str:
    return f"{CANCEL_PREFIX}{int(attempt_id)}"


def cancelled_ids(payloads: list[str]) -> tuple[list[int], list[str]]:
    """(the attempt ids of the cancel payloads, the other payloads)."""
    ids: list[int] = []
    others: list[str] = []
    for payload in payloads:
        number = payload[len(CANCEL_PREFIX) :] if payload.startswith(CANCEL_PREFIX) else ""
        if number.isdigit():
            ids.append(int(number))
        else:
            others.append(payload)
    return ids, others
