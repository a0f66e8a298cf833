"""One authenticated connection to the socket server (used by both clients).

Not thread-safe by itself: ``LockClient`` and ``NotifyClient`` serialize the
calls. A channel that saw any socket error, timeout or protocol error is
dead (``alive`` is False) and is never used again: the owner opens a new one.
"""

from __future__ import annotations

import itertools
import select
import socket
import time
from collections.abc import Callable
from typing import Any

from nsj_queue_lib import protocol
from nsj_queue_lib.exceptions import QueueLibError

RECV_SIZE = 65536


class ServerConnectionError(QueueLibError, ConnectionError):
    """No usable connection to the socket server (refused, lost, timed out, closed).

    Every lock the connection held is gone: the server releases a
    connection's locks when it closes. Call ``reconnect()``.
    """


class AuthenticationError(ServerConnectionError):
    """The server refused our hello: missing or wrong ``QUEUE_SERVER_TOKEN``."""


class ServerRequestError(QueueLibError):
    """The server answered a request with an error (the connection stays usable)."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _keepalive(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 10)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 5)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass


class Channel:
    def __init__(
        self,
        host: str,
        port: int,
        token: str | None,
        client_name: str,
        timeout: float,
        on_push: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.host = host
        self.port = port
        self.timeout = timeout
        self._token = token
        self.client_name = client_name
        self._on_push = on_push
        self._sock: socket.socket | None = None
        self._decoder = protocol.FrameDecoder()
        self._ids = itertools.count(1)
        self.alive = False
        self.server_info: dict[str, Any] = {}

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def open(self) -> None:
        """Connect and authenticate; ServerConnectionError (or AuthenticationError) on failure."""
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as exc:
            raise ServerConnectionError(
                f"cannot connect to the queue server at {self.address}: {exc}"
            ) from exc
        _keepalive(sock)
        self._sock = sock
        self.alive = True
        hello = {"op": "hello", "id": 0, "client": self.client_name}
        if self._token is not None:
            hello["token"] = self._token
        reply = self._exchange(hello, 0)
        if not reply.get("ok"):
            self.close()
            code, message = str(reply.get("error")), str(reply.get("message", ""))
            if code == "unauthorized":
                raise AuthenticationError(
                    f"the queue server at {self.address} refused our token (QUEUE_SERVER_TOKEN): {message}"
                )
            raise ServerConnectionError(
                f"the queue server at {self.address} refused the connection: {code}: {message}"
            )
        self.server_info = reply

    def close(self) -> None:
        self.alive = False
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None

    def fileno(self) -> int:
        if self._sock is None or not self.alive:
            raise ServerConnectionError(f"not connected to the queue server at {self.address}")
        return self._sock.fileno()

    def _lost(self, what: str, exc: BaseException | None = None) -> ServerConnectionError:
        self.close()
        detail = f": {exc}" if exc is not None and str(exc) else ""
        return ServerConnectionError(
            f"connection to the queue server at {self.address} lost ({what}{detail})"
        )

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and return its successful reply (ServerRequestError on an error reply)."""
        rid = next(self._ids)
        reply = self._exchange({"op": op, "id": rid, **fields}, rid)
        if not self.alive:
            raise ServerConnectionError(
                f"the queue server at {self.address} closed the connection: "
                f"{reply.get('error')}: {reply.get('message', '')}"
            )
        if not reply.get("ok"):
            raise ServerRequestError(str(reply.get("error")), str(reply.get("message", "")))
        return reply

    def _exchange(self, message: dict[str, Any], rid: int) -> dict[str, Any]:
        if self._sock is None or not self.alive:
            raise ServerConnectionError(f"not connected to the queue server at {self.address}")
        # FrameTooLarge here is the caller's bug, not a lost connection.
        frame = protocol.encode(message)
        deadline = time.monotonic() + self.timeout
        try:
            self._sock.settimeout(self.timeout)
            self._sock.sendall(frame)
        except OSError as exc:
            # The server may have said why before closing (busy, unauthorized).
            reason = self._read_goodbye()
            if reason is not None:
                return reason
            raise self._lost("send failed", exc) from exc
        while True:
            message = self._next_message(deadline)
            if message.get("op") == "notify" and "id" not in message:
                if self._on_push is not None:
                    self._on_push(message)
                continue
            if message.get("id") == rid:
                self._push_complete()
                return message
            if message.get("id") is None and message.get("ok") is False:
                # The server is closing this connection and says why.
                self.close()
                return message
            # A reply to an earlier request that timed out cannot happen (a
            # timeout kills the channel); anything else is ignored.

    def _push_complete(self) -> None:
        """Hand over notifications that arrived in the same read as a reply."""
        while True:
            try:
                message = self._decoder.next_message()
            except protocol.ProtocolError as exc:
                raise self._lost("protocol error", exc) from exc
            if message is None:
                return
            if message.get("op") == "notify" and "id" not in message and self._on_push is not None:
                self._on_push(message)

    def _next_message(self, deadline: float) -> dict[str, Any]:
        while True:
            try:
                message = self._decoder.next_message()
            except protocol.ProtocolError as exc:
                raise self._lost("protocol error", exc) from exc
            if message is not None:
                return message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._lost(f"no answer within {self.timeout:g}s")
            if self._sock is None:
                raise self._lost("closed while waiting for an answer")
            try:
                self._sock.settimeout(remaining)
                data = self._sock.recv(RECV_SIZE)
            except TimeoutError as exc:
                raise self._lost(f"no answer within {self.timeout:g}s") from exc
            except OSError as exc:
                raise self._lost("receive failed", exc) from exc
            if not data:
                raise self._lost("closed by the server")
            self._decoder.feed(data)

    def _read_goodbye(self) -> dict[str, Any] | None:
        """After a failed send: an error frame the server sent before closing, if any."""
        if self._sock is None:
            return None
        try:
            self._sock.settimeout(0.2)
            while True:
                data = self._sock.recv(RECV_SIZE)
                if not data:
                    break
                self._decoder.feed(data)
        except OSError:
            pass
        try:
            for message in self._decoder.messages():
                if message.get("ok") is False:
                    self.close()
                    return message
        except protocol.ProtocolError:
            pass
        return None

    def receive_available(self) -> list[dict[str, Any]]:
        """Every complete message already sent by the server, without blocking.

        Raises ServerConnectionError when the server closed the connection
        (after the caller has taken what was read before).
        """
        if self._sock is None or not self.alive:
            raise ServerConnectionError(f"not connected to the queue server at {self.address}")
        closed = None
        try:
            while True:
                readable, _, _ = select.select([self._sock], [], [], 0)
                if not readable:
                    break
                data = self._sock.recv(RECV_SIZE)
                if not data:
                    closed = "closed by the server"
                    break
                self._decoder.feed(data)
        except OSError as exc:
            closed = f"receive failed: {exc}"
        messages = []
        try:
            while (message := self._decoder.next_message()) is not None:
                messages.append(message)
        except protocol.ProtocolError as exc:
            closed = f"protocol error: {exc}"
        if closed is not None:
            self.close()
            if not messages:
                raise ServerConnectionError(
                    f"connection to the queue server at {self.address} lost ({closed})"
                )
        return messages
