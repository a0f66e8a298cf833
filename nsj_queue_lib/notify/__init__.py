"""How a worker is woken: the payloads every wake-up mechanism carries.

The mechanisms themselves are the database's LISTEN (``db/postgres/listener.py``),
polling (``notify/polling.py``) and the socket server (``notify/server_listener.py``);
a driver picks one.
"""

HALT_PAYLOAD = "HALT"  # every worker of the queue stops
SCHEDULED_PAYLOAD = "scheduled"  # a task due later was inserted: re-plan the next wake-up
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
