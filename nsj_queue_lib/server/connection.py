"""One client connection of the socket server, and the limits every connection lives by."""

from __future__ import annotations

import selectors
import socket
from typing import Any

from nsj_queue_lib import protocol

SERVER_NAME = "nsj_queue_lib"
MAX_NAME_LENGTH = 256  # lock names and queue names
MAX_PAYLOAD_LENGTH = 8000  # like PostgreSQL's NOTIFY payload limit
MAX_CLIENT_NAME_LENGTH = 100
MAX_HELD_NAMES = 10_000  # names in one "held" request
MAX_LOCKS_PER_CONNECTION = 10_000
MAX_QUEUES_PER_CONNECTION = 1_000
MAX_OUTPUT_BYTES = 1024 * 1024  # unsent bytes for one client before it is dropped
MAX_ACCEPTS_PER_ROUND = 64
# A refused connection (busy, unauthorized) is kept up to this long after its
# error frame, so the client can read why before the socket closes.
LINGER_SECONDS = 1.0
MAX_LINGERING = 256
RECV_SIZE = 65536


class BadRequest(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class Connection:
    def __init__(self, cid: int, sock: socket.socket, peer: str, service: str, deadline: float):
        self.id = cid
        self.sock = sock
        self.peer = peer
        self.service = service
        self.decoder = protocol.FrameDecoder()
        self.out = bytearray()
        self.events = selectors.EVENT_READ
        self.authenticated = False
        self.admin = False
        self.client = "?"
        self.hello_deadline = deadline
        self.queues: set[str] = set()
        self.closed = False
        self.lingering_until: float | None = None
        self.shutdown_after_flush = False

    def label(self) -> str:
        name = f" ({self.client})" if self.authenticated else ""
        return f"conn #{self.id}{name} from {self.peer}"


def peer_name(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = addr[0]
        return f"[{host}]:{addr[1]}" if ":" in str(host) else f"{host}:{addr[1]}"
    return str(addr)


def set_keepalive(sock: socket.socket, idle: float) -> None:
    """TCP keepalive: a peer that vanished without closing is found after about 2 x ``idle``."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            seconds = max(1, int(idle))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, seconds)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, seconds // 3))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass
