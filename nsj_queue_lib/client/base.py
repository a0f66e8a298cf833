"""What both clients share: connect, reconnect with back-off, close, requests."""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

from nsj_queue_lib.client.channel import Channel, ServerConnectionError

DEFAULT_TIMEOUT = 5.0
INITIAL_RECONNECT_DELAY = 0.1
MAX_RECONNECT_DELAY = 5.0

_log = logging.getLogger("nsj_queue_lib.client")


class BaseClient:
    """One connection to the server, used by one thread at a time (calls are serialized)."""

    def __init__(
        self,
        host: str,
        port: int,
        token: str | None = None,
        client_name: str = "nsj_queue_lib",
        timeout: float = DEFAULT_TIMEOUT,
        connect: bool = True,
    ):
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        self.host = host
        self.port = int(port)
        self._token = token
        self.client_name = client_name
        self.timeout = float(timeout)
        self._lock = threading.RLock()
        self._channel: Channel | None = None
        self._closed = False
        if connect:
            self.connect()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self.connected else "disconnected")
        return f"<{type(self).__name__} {self.host}:{self.port} {self.client_name!r} {state}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        channel = self._channel
        return channel is not None and channel.alive

    def _on_push(self, message: dict[str, Any]) -> None:
        """A notification read while waiting for a reply (ignored unless overridden)."""

    def _after_connect(self, channel: Channel) -> None:
        """Runs on a fresh channel before it is published (e.g. to re-subscribe)."""

    def connect(self) -> None:
        """Open a new connection now (one attempt); ServerConnectionError on failure."""
        with self._lock:
            if self._closed:
                raise ServerConnectionError(f"{type(self).__name__} was closed")
            if self._channel is not None:
                self._channel.close()
                self._channel = None
            channel = Channel(
                self.host, self.port, self._token, self.client_name, self.timeout, self._on_push
            )
            channel.open()
            try:
                self._after_connect(channel)
            except BaseException:
                channel.close()
                raise
            self._channel = channel

    def reconnect(
        self,
        stop: threading.Event | None = None,
        max_wait: float | None = None,
        initial_delay: float = INITIAL_RECONNECT_DELAY,
        max_delay: float = MAX_RECONNECT_DELAY,
    ) -> bool:
        """Connect again, retrying with exponential back-off (with jitter).

        Returns True once connected (at once when the connection is still
        alive, so several threads may call it after one failure), False when
        ``stop`` is set, ``max_wait`` seconds have passed, or the client was
        closed. Locks held before are NOT taken again.
        """
        deadline = None if max_wait is None else time.monotonic() + max_wait
        delay = initial_delay
        attempt = 0
        while True:
            with self._lock:
                if self._closed:
                    return False
                if self.connected:
                    return True
                attempt += 1
                try:
                    self.connect()
                except ServerConnectionError as exc:
                    level = logging.INFO if attempt == 1 else logging.DEBUG
                    _log.log(
                        level, "%s: reconnect attempt %d failed: %s", self.client_name, attempt, exc
                    )
                else:
                    _log.info(
                        "%s: reconnected to %s:%d (attempt %d)",
                        self.client_name,
                        self.host,
                        self.port,
                        attempt,
                    )
                    return True
            pause = delay * (0.5 + random.random() / 2)
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                pause = min(pause, remaining)
            if stop is not None:
                if stop.wait(pause):
                    return False
            else:
                time.sleep(pause)
            delay = min(delay * 2, max_delay)

    def close(self) -> None:
        """Close the connection for good (the server releases this client's locks)."""
        with self._lock:
            self._closed = True
            if self._channel is not None:
                self._channel.close()
                self._channel = None

    def _usable(self) -> Channel:
        channel = self._channel
        if self._closed:
            raise ServerConnectionError(f"{type(self).__name__} was closed")
        if channel is None or not channel.alive:
            raise ServerConnectionError(
                f"not connected to the queue server at {self.host}:{self.port}; call reconnect()"
            )
        return channel

    def _request(self, op: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            return self._usable().request(op, **fields)

    def notify(self, queue: str, payload: str = "") -> int:
        """Wake the subscribers of ``queue`` (``'HALT'`` stops workers); how many were notified.
        Any client may notify: a lock client's worker tells task ends with it."""
        return int(self._request("notify", queue=queue, payload=payload)["delivered"])

    def ping(self) -> None:
        """A round trip to the server (ServerConnectionError when it is gone)."""
        self._request("ping")
