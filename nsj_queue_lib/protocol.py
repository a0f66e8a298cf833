"""The wire format of the socket server, shared by the server and its clients.

A frame is a 4-byte big-endian unsigned length followed by that many bytes of
UTF-8 JSON: one object carrying ``"v": 1``. A frame body is at most
``MAX_FRAME_SIZE`` bytes; a larger announced length is refused as soon as the
4 length bytes are seen, before any of the body is read.

``FrameDecoder`` is incremental (feed it whatever ``recv`` returned, take
whole messages out) and remembers when the frame in progress started, so the
server can drop a peer that sends half a frame and stalls. ``encode`` builds
one frame. Nothing here touches a socket.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable
from typing import Any

from nsj_queue_lib.exceptions import QueueLibError

VERSION = 1
HEADER = struct.Struct(">I")
HEADER_SIZE = HEADER.size
MAX_FRAME_SIZE = 64 * 1024  # bytes of JSON in one frame


class ProtocolError(QueueLibError):
    """The peer broke the framing or message rules; the connection must be closed."""


class FrameTooLarge(ProtocolError):
    """A frame longer than the limit was announced (or would be sent)."""


class UnsupportedVersion(ProtocolError):
    """A message without ``"v": 1``."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def encode(message: dict[str, Any], max_size: int = MAX_FRAME_SIZE) -> bytes:
    """One frame for ``message`` (``"v"`` is added when missing)."""
    if not isinstance(message, dict):
        raise TypeError(f"a message is a dict, got {type(message).__name__}")
    if "v" not in message:
        message = {"v": VERSION, **message}
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8", "surrogatepass"
    )
    if len(body) > max_size:
        raise FrameTooLarge(f"message of {len(body)} bytes exceeds the {max_size}-byte frame limit")
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict[str, Any]:
    """The message in one frame body; ProtocolError when it is not a v1 JSON object."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("frame is not valid UTF-8") from None
    try:
        message = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise ProtocolError("frame is not valid JSON") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"frame is JSON {type(message).__name__}, not an object")
    version = message.get("v")
    if type(version) is not int or version != VERSION:
        raise UnsupportedVersion(
            f"unsupported protocol version {version!r} (this side speaks {VERSION})"
        )
    return message


class FrameDecoder:
    """Reassembles frames from arbitrary chunks of bytes.

    ``feed(data)`` stores bytes; ``next_message()`` returns the next whole
    message, ``None`` while it is incomplete, or raises ``ProtocolError``.
    ``frame_started`` is the clock reading when the first byte of the
    incomplete frame arrived (``None`` when nothing is pending).
    """

    def __init__(self, max_size: int = MAX_FRAME_SIZE, clock: Callable[[], float] = time.monotonic):
        self.max_size = max_size
        self._clock = clock
        self._buffer = bytearray()
        self._offset = 0
        self.frame_started: float | None = None

    def feed(self, data: bytes) -> None:
        if not data:
            return
        if self.frame_started is None:
            self.frame_started = self._clock()
        self._buffer += data

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as messages."""
        return len(self._buffer) - self._offset

    def next_message(self) -> dict[str, Any] | None:
        available = len(self._buffer) - self._offset
        if available < HEADER_SIZE:
            self._compact()
            return None
        (length,) = HEADER.unpack_from(self._buffer, self._offset)
        if length > self.max_size:
            raise FrameTooLarge(
                f"announced frame of {length} bytes exceeds the {self.max_size}-byte limit"
            )
        if available < HEADER_SIZE + length:
            return None
        start = self._offset + HEADER_SIZE
        body = bytes(self._buffer[start : start + length])
        self._offset = start + length
        self._compact()
        # The next frame (if any bytes of it are here) starts now.
        self.frame_started = self._clock() if self.buffered else None
        return decode_body(body)

    def messages(self, data: bytes = b"") -> list[dict[str, Any]]:
        """Feed ``data`` and return every whole message now available."""
        self.feed(data)
        out = []
        while (message := self.next_message()) is not None:
            out.append(message)
        return out

    def _compact(self) -> None:
        if self._offset and (self._offset >= len(self._buffer) or self._offset > 65536):
            del self._buffer[: self._offset]
            self._offset = 0
        if not self._buffer:
            self.frame_started = None
