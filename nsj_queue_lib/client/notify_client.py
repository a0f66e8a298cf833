"""``NotifyClient``: wake-ups for the queues this client subscribed to."""

from __future__ import annotations

import select
from typing import TYPE_CHECKING, Any

from nsj_queue_lib.client.base import BaseClient
from nsj_queue_lib.client.channel import Channel, ServerConnectionError

if TYPE_CHECKING:
    from nsj_queue_lib.settings import Settings


class NotifyClient(BaseClient):
    """Subscribes to queues and reads the notifications the server pushes.

    Wait with ``wait(timeout, interrupt_fd)``, or put ``fileno()`` in your
    own ``select`` and call ``read_notifications()`` when it is readable.
    Notifications can arrive while a ``subscribe``/``notify`` call waits for
    its reply; they are kept, so with your own ``select`` check
    ``has_pending()`` first (``wait`` does). Subscriptions are remembered
    and renewed by ``reconnect()``. Queue names are case-insensitive: the
    server folds them to lower case, like PostgreSQL channel names.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        self._pending: list[tuple[str, str]] = []
        self._queues: dict[str, None] = {}
        super().__init__(*args, **kwargs)

    @classmethod
    def from_settings(
        cls, settings: Settings, client_name: str, connect: bool = True
    ) -> NotifyClient:
        """SERVER_HOST, NOTIFY_SERVICE_PORT, QUEUE_SERVER_TOKEN, TIMEOUT_SOCKET_MESSAGE."""
        return cls(
            settings.server_host,
            settings.notify_service_port,
            settings.queue_server_token,
            client_name,
            settings.timeout_socket_message,
            connect=connect,
        )

    def _on_push(self, message: dict[str, Any]) -> None:
        queue, payload = message.get("queue"), message.get("payload", "")
        if isinstance(queue, str) and isinstance(payload, str):
            self._pending.append((queue, payload))

    def _after_connect(self, channel: Channel) -> None:
        for queue in self._queues:
            channel.request("subscribe", queue=queue)

    @property
    def queues(self) -> list[str]:
        return list(self._queues)

    def subscribe(self, queue: str) -> None:
        """Receive the notifications of ``queue`` (renewed after every reconnect)."""
        with self._lock:
            folded = self._request("subscribe", queue=queue)["queue"]
            self._queues[folded] = None

    def unsubscribe(self, queue: str) -> None:
        with self._lock:
            folded = self._request("unsubscribe", queue=queue)["queue"]
            self._queues.pop(folded, None)

    def fileno(self) -> int:
        """The socket, for ``select``; ServerConnectionError when not connected."""
        with self._lock:
            return self._usable().fileno()

    def has_pending(self) -> bool:
        """Notifications already read and not yet returned."""
        with self._lock:
            return bool(self._pending)

    def read_notifications(self) -> list[tuple[str, str]]:
        """Every notification received so far as (queue, payload), without blocking.

        Raises ServerConnectionError when the connection is gone (after
        returning what arrived before it closed).
        """
        with self._lock:
            if self._pending and (self._channel is None or not self._channel.alive):
                return self._take_pending()
            channel = self._usable()
            for message in channel.receive_available():
                if message.get("op") == "notify" and "id" not in message:
                    self._on_push(message)
            return self._take_pending()

    def _take_pending(self) -> list[tuple[str, str]]:
        pending, self._pending = self._pending, []
        return pending

    def wait(self, timeout: float | None, interrupt_fd: int | None = None) -> list[tuple[str, str]]:
        """Block until a notification, ``interrupt_fd`` is readable, or ``timeout`` seconds.

        Returns the notifications (empty on timeout or interrupt).
        """
        if self.has_pending():
            return self.read_notifications()
        fds = [self.fileno()]
        if interrupt_fd is not None:
            fds.append(interrupt_fd)
        readable, _, _ = select.select(fds, [], [], None if timeout is None else max(0.0, timeout))
        if fds[0] in readable:
            return self.read_notifications()
        return []


__all__ = ["NotifyClient", "ServerConnectionError"]
