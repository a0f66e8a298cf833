"""``LockClient``: named try-locks held by this client's connection to the server."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nsj_queue_lib.client.base import BaseClient
from nsj_queue_lib.client.channel import Channel

_log = logging.getLogger("nsj_queue_lib.client")

if TYPE_CHECKING:
    from nsj_queue_lib.settings import Settings


class LockClient(BaseClient):
    """Thread-safe: one request at a time over one socket, replies matched by id.

    A lock belongs to this client's connection. It is released by
    ``unlock``, by ``close``, or by the server the moment the connection
    ends (the process died, the network failed, the server restarted). When
    a call raises ``ServerConnectionError`` every lock of this client is
    gone; ``reconnect()`` opens a new connection and tries to take again
    every lock this client held (its holder is still running: a worker's
    task does not stop because the server restarted). Taking a lock the
    client already holds returns True (locks are not counted: one ``unlock``
    releases it).
    """

    def __init__(self, *args: Any, **kwargs: Any):
        self._wanted: set[str] = set()
        super().__init__(*args, **kwargs)

    def _after_connect(self, channel: Channel) -> None:
        lost = []
        for name in sorted(self._wanted):
            if not channel.request("lock", name=name)["acquired"]:
                lost.append(name)
        for name in lost:
            self._wanted.discard(name)
            _log.warning(
                "%s: lock %s was taken by another client while disconnected", self.client_name, name
            )

    @classmethod
    def from_settings(
        cls, settings: Settings, client_name: str, connect: bool = True
    ) -> LockClient:
        """SERVER_HOST, LOCK_SERVICE_PORT, QUEUE_SERVER_TOKEN, TIMEOUT_SOCKET_MESSAGE."""
        return cls(
            settings.server_host,
            settings.lock_service_port,
            settings.queue_server_token,
            client_name,
            settings.timeout_socket_message,
            connect=connect,
        )

    def try_lock(self, name: str) -> bool:
        """Take ``name`` if nobody else holds it; never waits."""
        with self._lock:
            acquired = bool(self._request("lock", name=name)["acquired"])
            if acquired:
                self._wanted.add(name)
            return acquired

    def unlock(self, name: str) -> bool:
        """Release ``name``; False when this client did not hold it."""
        with self._lock:
            self._wanted.discard(name)
            return bool(self._request("unlock", name=name)["released"])

    def holding(self) -> set[str]:
        """The locks this client holds (or will take again on reconnecting)."""
        with self._lock:
            return set(self._wanted)

    def held(self, names: Iterable[str]) -> set[str]:
        """Which of ``names`` are held right now, by any client (this one included)."""
        names = list(dict.fromkeys(names))
        if not names:
            return set()
        return set(self._request("held", names=names)["held"])

    def halt(self) -> None:
        """Stop the server (needs QUEUE_SERVER_TOKEN on both sides; ServerRequestError otherwise)."""
        self._request("halt")
