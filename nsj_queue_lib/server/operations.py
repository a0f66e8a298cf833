"""What an authenticated client of the socket server may ask: locks, subscriptions, notify, halt.

Each operation takes the connection and its request and returns the reply's
fields, or raises ``BadRequest``; the event loop sends the reply.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from nsj_queue_lib.db.dialect import notify_channel
from nsj_queue_lib.server.connection import (
    MAX_HELD_NAMES,
    MAX_LOCKS_PER_CONNECTION,
    MAX_NAME_LENGTH,
    MAX_PAYLOAD_LENGTH,
    MAX_QUEUES_PER_CONNECTION,
    BadRequest,
    Connection,
)
from nsj_queue_lib.server.locks import LockTable

Operation = Callable[[Connection, dict[str, Any]], "dict[str, Any] | None"]


def request_name(message: dict[str, Any], field: str, what: str) -> str:
    value = message.get(field)
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_LENGTH:
        raise BadRequest(
            "bad_request", f"{field!r} must be a {what} of 1 to {MAX_NAME_LENGTH} characters"
        )
    return value


class Operations:
    def __init__(
        self,
        locks: LockTable,
        subscribers: dict[str, set[Connection]],
        log: logging.Logger,
        fan_out: Callable[[str, str], int],
        stop: Callable[[str], None],
    ):
        self.locks = locks
        self.subscribers = subscribers
        self.log = log
        self.fan_out = fan_out
        self.stop = stop

    def table(self) -> dict[str, Operation]:
        return {
            "ping": self.ping,
            "lock": self.lock,
            "unlock": self.unlock,
            "held": self.held,
            "subscribe": self.subscribe,
            "unsubscribe": self.unsubscribe,
            "notify": self.notify,
            "halt": self.halt,
            "hello": self.hello_again,
        }

    def ping(self, conn: Connection, message: dict[str, Any]) -> dict[str, Any]:
        return {"pong": True}

    def hello_again(self, conn: Connection, message: dict[str, Any]) -> dict[str, Any]:
        raise BadRequest("bad_request", "already authenticated")

    def lock(self, conn: Connection, message: dict[str, Any]) -> dict[str, Any]:
        name = request_name(message, "name", "lock name")
        if (
            self.locks.owner_of(name) is None
            and self.locks.count(conn.id) >= MAX_LOCKS_PER_CONNECTION
        ):
            raise BadRequest(
                "too_many_locks", f"a connection holds at most {MAX_LOCKS_PER_CONNECTION} locks"
            )
        acquired = self.locks.try_lock(conn.id, name)
        self.log.debug("%s: lock %r -> %s", conn.label(), name, acquired)
        return {"acquired": acquired}

    def unlock(self, conn: Connection, message: dict[str, Any]) -> dict[str, Any]:
        name = request_name(message, "name", "lock name")
        released = self.locks.unlock(conn.id, name)
        self.log.debug("%s: unlock %r -> %s", conn.label(), name, released)
        return {"released": released}

    def held(self, conn: Connection, message: dict[str, Any]) -> dict[str, Any]:
        names = message.get("names")
        if (
            not isinstance(names, list)
            or len(names) > MAX_HELD_NAMES
            or not all(isinstance(n, str) and n and len(n) <= MAX_NAME_LENGTH for n in names)
        ):
            raise BadRequest(
                "bad_request", f"'names' must be a list of at most {MAX_HELD_NAMES} lock names"
            )
        return {"held": self.locks.held(names)}

    def subscribe(self, conn: Connection, message: dict[str, Any]) -> dict[str, Any]:
        queue = notify_channel(request_name(message, "queue", "queue name"))
        if queue not in conn.queues and len(conn.queues) >= MAX_QUEUES_PER_CONNECTION:
            raise BadRequest(
                "too_many_queues",
                f"a connection subscribes to at most {MAX_QUEUES_PER_CONNECTION} queues",
            )
        conn.queues.add(queue)
        self.subscribers[queue].add(conn)
        self.log.info("%s: subscribed to %r", conn.label(), queue)
        return {"queue": queue}

    def unsubscribe(self, conn: Connection, message: dict[str, Any]) -> dict[str, Any]:
        queue = notify_channel(request_name(message, "queue", "queue name"))
        conn.queues.discard(queue)
        subscribers = self.subscribers.get(queue)
        if subscribers is not None:
            subscribers.discard(conn)
            if not subscribers:
                del self.subscribers[queue]
        return {"queue": queue}

    def notify(self, conn: Connection, message: dict[str, Any]) -> dict[str, Any]:
        queue = request_name(message, "queue", "queue name")
        payload = message.get("payload", "")
        if payload is None:
            payload = ""
        if not isinstance(payload, str) or len(payload) > MAX_PAYLOAD_LENGTH:
            raise BadRequest(
                "bad_request",
                f"'payload' must be a string of at most {MAX_PAYLOAD_LENGTH} characters",
            )
        if payload == "HALT":
            self.log.info("%s: notify %r HALT", conn.label(), notify_channel(queue))
        return {"delivered": self.fan_out(queue, payload)}

    def halt(self, conn: Connection, message: dict[str, Any]) -> dict[str, Any]:
        if not conn.admin:
            self.log.warning("%s: halt refused (no QUEUE_SERVER_TOKEN configured)", conn.label())
            raise BadRequest(
                "forbidden",
                "halt needs QUEUE_SERVER_TOKEN configured on the server and an authenticated session",
            )
        self.log.warning("%s: halt requested", conn.label())
        self.stop(f"halt requested by {conn.label()}")
        return {"halting": True}
