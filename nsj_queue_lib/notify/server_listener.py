"""Wake-ups from the socket server (CLIENT_SERVER_MODE), same interface as PostgresListener."""

from __future__ import annotations

import os
import socket

from nsj_queue_lib.client.channel import ServerConnectionError
from nsj_queue_lib.client.notify_client import NotifyClient
from nsj_queue_lib.db.dialect import notify_channel
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.settings import Settings


class ServerListener:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.channel = notify_channel(settings.queue_name)
        self._client: NotifyClient | None = None

    def open(self) -> None:
        self.close()
        name = f"{self.settings.queue_name}:{socket.gethostname()}:{os.getpid()}:notify"
        try:
            client = NotifyClient.from_settings(self.settings, name)
            client.subscribe(self.channel)
        except ServerConnectionError as exc:
            # Reported like a database outage: the dispatcher backs off and retries.
            raise DatabaseError(f"socket server unavailable: {exc}") from exc
        self._client = client

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # noqa: BLE001 - closing a client that may be disconnected
                pass
            self._client = None

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        if self._client is None:
            raise DatabaseError("not connected to the socket server")
        try:
            notes = self._client.wait(timeout, interrupt_fd=interrupt_fd)
        except ServerConnectionError as exc:
            raise DatabaseError(f"socket server connection lost: {exc}") from exc
        return [payload for queue, payload in notes if queue == self.channel]
