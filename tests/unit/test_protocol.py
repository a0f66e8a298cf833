"""The wire format: 4-byte big-endian length + UTF-8 JSON object with "v": 1."""

from __future__ import annotations

import json
import struct

import pytest

from nsj_queue_lib import protocol
from nsj_queue_lib.protocol import FrameDecoder, FrameTooLarge, ProtocolError, UnsupportedVersion


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def test_round_trip_adds_the_version():
    data = protocol.encode({"op": "lock", "id": 7, "name": "tarefa:1"})
    assert struct.unpack(">I", data[:4])[0] == len(data) - 4
    assert json.loads(data[4:]) == {"v": 1, "op": "lock", "id": 7, "name": "tarefa:1"}
    assert FrameDecoder().messages(data) == [{"v": 1, "op": "lock", "id": 7, "name": "tarefa:1"}]


def test_unicode_round_trip():
    message = {"op": "notify", "queue": "fila", "payload": "ação ✓ 😀"}
    assert FrameDecoder().messages(protocol.encode(message)) == [{"v": 1, **message}]


def test_several_frames_in_one_chunk():
    data = b"".join(protocol.encode({"op": "ping", "id": i}) for i in range(5))
    assert [m["id"] for m in FrameDecoder().messages(data)] == list(range(5))


def test_partial_reads_byte_by_byte():
    data = protocol.encode({"op": "ping", "id": 1}) + protocol.encode({"op": "ping", "id": 2})
    decoder = FrameDecoder()
    seen = []
    for i in range(len(data)):
        seen += decoder.messages(data[i : i + 1])
    assert [m["id"] for m in seen] == [1, 2]
    assert decoder.buffered == 0 and decoder.frame_started is None


def test_frame_started_tracks_the_incomplete_frame():
    now = [100.0]
    decoder = FrameDecoder(clock=lambda: now[0])
    data = protocol.encode({"op": "ping", "id": 1})
    assert decoder.frame_started is None
    decoder.feed(data[:3])
    assert decoder.next_message() is None
    assert decoder.frame_started == 100.0
    now[0] = 101.0
    decoder.feed(data[3:6])
    assert decoder.next_message() is None
    assert decoder.frame_started == 100.0  # same frame, still started at its first byte
    now[0] = 102.0
    second = protocol.encode({"op": "ping", "id": 2})
    decoder.feed(data[6:] + second[:2])
    assert decoder.next_message()["id"] == 1
    assert decoder.frame_started == 102.0  # the next frame began in this chunk
    assert decoder.next_message() is None
    decoder.feed(second[2:])
    assert decoder.next_message()["id"] == 2
    assert decoder.frame_started is None


def test_oversized_length_is_refused_from_the_header_alone():
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">I", 10 * 1024 * 1024))  # 10 MB announced, no body sent
    with pytest.raises(FrameTooLarge):
        decoder.next_message()


def test_largest_allowed_frame_passes_and_one_more_byte_does_not():
    filler = "x" * (protocol.MAX_FRAME_SIZE - len(b'{"v":1,"p":""}'))
    body = json.dumps({"v": 1, "p": filler}, separators=(",", ":")).encode()
    assert len(body) == protocol.MAX_FRAME_SIZE
    assert FrameDecoder().messages(frame(body))[0]["p"] == filler
    with pytest.raises(FrameTooLarge):
        FrameDecoder().messages(frame(body + b" "))


def test_encode_refuses_an_oversized_message():
    with pytest.raises(FrameTooLarge):
        protocol.encode({"payload": "x" * protocol.MAX_FRAME_SIZE})


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b'{"v": 1,',
        b"\xff\xfe{}",  # not UTF-8
        b"[1, 2, 3]",  # not an object
        b'"hello"',
        b'{"v": 1, "x": NaN}',
        b"[" * 50_000 + b"]" * 50_000,  # nesting deep enough to blow the parser's recursion
    ],
    ids=["empty", "garbage", "truncated", "not-utf8", "array", "string", "nan", "deep-nesting"],
)
def test_bad_bodies_are_protocol_errors(body):
    with pytest.raises(ProtocolError):
        FrameDecoder().messages(frame(body))


@pytest.mark.parametrize("version", [None, 0, 2, "1", 1.0, True])
def test_wrong_or_missing_version(version):
    message = {"op": "ping"} if version is None else {"v": version, "op": "ping"}
    with pytest.raises(UnsupportedVersion):
        FrameDecoder().messages(frame(json.dumps(message).encode()))


def test_messages_before_a_bad_frame_are_returned_one_by_one():
    decoder = FrameDecoder()
    decoder.feed(protocol.encode({"op": "ping", "id": 1}) + frame(b"garbage"))
    assert decoder.next_message()["id"] == 1
    with pytest.raises(ProtocolError):
        decoder.next_message()


def test_garbage_bytes_read_as_a_huge_length():
    decoder = FrameDecoder()
    decoder.feed(b"GET / HTTP/1.1\r\n\r\n")
    with pytest.raises(FrameTooLarge):
        decoder.next_message()
