"""The socket server is safe by default: bad clients lose their own connection, nothing else.

Every test runs ``python -m nsj_queue_lib.server`` as a real process on
127.0.0.1 (its database is unreachable on purpose: the socket services do
not depend on it).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from nsj_queue_lib import protocol
from nsj_queue_lib.client import AuthenticationError, ServerConnectionError, ServerRequestError
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.server.config import resolve_bind_host
from tests.helpers.server_process import (
    ROOT,
    TEST_TOKEN,
    ServerProcess,
    free_port,
    local_non_loopback_ip,
    read_until_closed,
    unreachable_db_env,
    wait_until,
)

FAST = 0.5  # TIMEOUT_SOCKET_MESSAGE of these tests


# -- helpers -----------------------------------------------------------------


def send_frame(sock: socket.socket, message: dict) -> None:
    sock.sendall(protocol.encode(message))


def hello(sock: socket.socket, token: str | None = TEST_TOKEN) -> dict:
    send_frame(sock, {"op": "hello", "id": 0, "token": token, "client": "raw"})
    decoder = protocol.FrameDecoder()
    while (message := decoder.next_message()) is None:
        data = sock.recv(65536)
        assert data, "server closed the connection during hello"
        decoder.feed(data)
    return message


class GoodClient:
    """A well-behaved worker: holds a lock, is subscribed, and keeps working."""

    def __init__(self, server: ServerProcess):
        self.locks = server.lock_client("good-worker")
        self.notify = server.notify_client("good-worker")
        self.notify.subscribe("fila_teste")
        self.sender = server.notify_client("good-sender")
        assert self.locks.try_lock("good:lock")

    def check(self) -> None:
        self.locks.ping()
        assert self.locks.held(["good:lock"]) == {"good:lock"}
        assert self.locks.try_lock("good:other") and self.locks.unlock("good:other")
        assert self.sender.notify("fila_teste", "still-here") == 1
        assert self.notify.wait(5) == [("fila_teste", "still-here")]


# -- binding -------------------------------------------------------------------


@pytest.mark.parametrize(
    "requested, token, expected",
    [
        (None, None, "127.0.0.1"),
        ("0.0.0.0", None, "127.0.0.1"),
        ("10.1.2.3", None, "127.0.0.1"),
        ("::", None, "127.0.0.1"),
        ("::1", None, "::1"),
        ("127.0.0.2", None, "127.0.0.2"),
        ("localhost", None, "localhost"),
        (None, "secret", "0.0.0.0"),
        ("127.0.0.1", "secret", "127.0.0.1"),
        ("::", "secret", "::"),
    ],
)
def test_bind_address_is_loopback_without_a_token(requested, token, expected):
    host, warnings = resolve_bind_host(requested, token)
    assert host == expected
    assert bool(warnings) == (token is None and requested not in (None, expected))


def test_bind_address_must_be_an_ip_literal():
    with pytest.raises(ConfigError) as info:
        resolve_bind_host("example.com", "secret")
    assert "QUEUE_SERVER_BIND" in info.value.problems


def test_without_a_token_the_server_listens_on_loopback_only(servers):
    env = {**unreachable_db_env(), "QUEUE_SERVER_BIND": "0.0.0.0"}
    server = servers(token=None, env=env)
    log = server.log_text()
    assert f"listening on 127.0.0.1:{server.lock_port}" in log
    assert "QUEUE_SERVER_BIND=0.0.0.0 ignored" in log
    # Anyone local may connect, with or without a token.
    assert server.lock_client("no-token", token=None).try_lock("a")
    assert server.lock_client("some-token", token="whatever").held(["a"]) == {"a"}
    other = local_non_loopback_ip()
    if other is not None:
        with pytest.raises(OSError):
            socket.create_connection((other, server.lock_port), timeout=2).close()


def test_with_a_token_the_server_may_listen_on_every_interface(servers):
    env = {**unreachable_db_env(), "QUEUE_SERVER_BIND": "0.0.0.0"}
    server = servers(env=env)
    assert f"listening on 0.0.0.0:{server.lock_port}" in server.log_text()
    other = local_non_loopback_ip()
    if other is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    from nsj_queue_lib.client import LockClient

    with LockClient(other, server.lock_port, TEST_TOKEN, "remote", 5) as client:
        assert client.try_lock("remote")


# -- authentication --------------------------------------------------------------


def test_missing_and_wrong_tokens_are_refused(servers):
    server = servers(timeout_socket_message=FAST)
    good = GoodClient(server)
    with pytest.raises(AuthenticationError):
        server.lock_client("no-token", token=None)
    with pytest.raises(AuthenticationError):
        server.lock_client("empty-token", token="")
    with pytest.raises(AuthenticationError):
        server.lock_client("wrong-token", token="not-the-token-at-all")
    with pytest.raises(AuthenticationError):
        server.notify_client("prefix", token=TEST_TOKEN[:-1])
    good.check()
    log = server.log_text()
    assert "authentication failed (no token)" in log
    assert "authentication failed (wrong token)" in log
    assert (
        TEST_TOKEN not in log and TEST_TOKEN[:-1] not in log and "not-the-token-at-all" not in log
    )


def test_a_refused_client_gets_the_reason_before_the_close(servers):
    server = servers(timeout_socket_message=FAST)
    sock = server.raw_socket()
    send_frame(sock, {"op": "hello", "id": 5, "token": "wrong", "client": "raw"})
    frames, closed = read_until_closed(sock)
    assert closed
    assert frames == [
        {"v": 1, "id": 5, "ok": False, "error": "unauthorized", "message": "authentication failed"}
    ]


# -- bad clients ---------------------------------------------------------------------


def _garbage(server):
    sock = server.raw_socket()
    sock.sendall(b"GET / HTTP/1.1\r\nHost: queue\r\n\r\n")
    return sock


def _ten_megabytes(server):
    sock = server.raw_socket()
    sock.sendall(struct.pack(">I", 10 * 1024 * 1024))
    try:
        sock.sendall(b"x" * (1024 * 1024))  # starts sending the body; the server stops reading
    except OSError:
        pass
    return sock


def _silent(server):
    return server.raw_socket()


def _unauthenticated_halt(server):
    sock = server.raw_socket()
    send_frame(sock, {"op": "halt", "id": 1})
    return sock


def _request_before_hello(server):
    sock = server.raw_socket()
    send_frame(sock, {"op": "lock", "id": 1, "name": "good:lock"})
    return sock


def _bad_json(server):
    sock = server.raw_socket()
    sock.sendall(struct.pack(">I", 9) + b"{not json")
    return sock


def _wrong_version(server):
    sock = server.raw_socket()
    sock.sendall(protocol.encode({"v": 2, "op": "hello", "token": TEST_TOKEN}))
    return sock


def _half_frame_after_hello(server):
    sock = server.raw_socket()
    assert hello(sock)["ok"]
    sock.sendall(protocol.encode({"op": "ping", "id": 1})[:7])
    return sock


def _wrong_version_after_hello(server):
    sock = server.raw_socket()
    assert hello(sock)["ok"]
    sock.sendall(protocol.encode({"v": 99, "op": "ping", "id": 1}))
    return sock


def _half_hello(server):
    sock = server.raw_socket()
    sock.sendall(protocol.encode({"op": "hello", "token": TEST_TOKEN, "client": "slow"})[:10])
    return sock


BAD_CLIENTS = {
    "garbage-bytes": (_garbage, "frame_too_large"),
    "10MB-frame": (_ten_megabytes, "frame_too_large"),
    "silent": (_silent, "timeout"),
    "unauthenticated-halt": (_unauthenticated_halt, "unauthenticated"),
    "request-before-hello": (_request_before_hello, "unauthenticated"),
    "bad-json": (_bad_json, "protocol_error"),
    "wrong-version": (_wrong_version, "unsupported_version"),
    "half-frame-after-hello": (_half_frame_after_hello, "timeout"),
    "wrong-version-after-hello": (_wrong_version_after_hello, "unsupported_version"),
    "half-hello": (_half_hello, "timeout"),
}


@pytest.mark.parametrize("case", list(BAD_CLIENTS))
def test_a_bad_client_loses_only_its_own_connection(servers, case):
    server = servers(timeout_socket_message=FAST)
    good = GoodClient(server)
    make, code = BAD_CLIENTS[case]
    started = time.monotonic()
    sock = make(server)
    frames, closed = read_until_closed(sock, timeout=5)
    elapsed = time.monotonic() - started
    assert closed, f"{case}: the server kept the connection open"
    if code == "timeout":
        assert FAST * 0.8 <= elapsed < FAST + 2, elapsed
    else:
        assert elapsed < 2, elapsed
    if frames:  # best effort: the reason, when it arrives before the reset
        assert frames[-1]["ok"] is False and frames[-1]["error"] == code, frames
    assert server.alive
    good.check()
    assert wait_until(lambda: "closed conn" in server.log_text())


def test_every_bad_client_at_once_while_a_good_client_works(servers):
    server = servers(timeout_socket_message=FAST)
    good = GoodClient(server)
    errors: list[BaseException] = []
    stop = threading.Event()

    def work():
        try:
            while not stop.is_set():
                good.check()
        except BaseException as exc:  # the test asserts none were collected
            errors.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    try:
        socks = [make(server) for make, _ in BAD_CLIENTS.values()]
        for sock in socks:
            _, closed = read_until_closed(sock, timeout=5)
            assert closed
        for token in (None, "wrong"):
            with pytest.raises(AuthenticationError):
                server.lock_client("bad", token=token)
    finally:
        stop.set()
        worker.join(10)
    assert not errors, errors
    assert server.alive
    good.check()


def test_unknown_operations_and_bad_arguments_get_an_error_and_keep_the_connection(servers):
    server = servers()
    sock = server.raw_socket()
    assert hello(sock)["ok"]
    send_frame(sock, {"op": "fly", "id": 1})
    send_frame(sock, {"op": "lock", "id": 2, "name": ""})
    send_frame(sock, {"op": "held", "id": 3, "names": "not-a-list"})
    send_frame(sock, {"op": "hello", "id": 4, "token": TEST_TOKEN})
    send_frame(sock, {"op": "ping", "id": "five"})
    decoder = protocol.FrameDecoder()
    replies: list[dict] = []
    sock.settimeout(5)
    while len(replies) < 5:
        data = sock.recv(65536)
        assert data
        replies += decoder.messages(data)
    assert [(r["id"], r["ok"], r.get("error")) for r in replies] == [
        (1, False, "unknown_op"),
        (2, False, "bad_request"),
        (3, False, "bad_request"),
        (4, False, "bad_request"),
        ("five", True, None),
    ]
    client = server.lock_client()
    with pytest.raises(ServerRequestError) as info:
        client.try_lock("x" * 1000)
    assert info.value.code == "bad_request"
    assert client.try_lock("fine")


# -- halt -------------------------------------------------------------------------


def test_halt_is_refused_when_no_token_is_configured(servers):
    server = servers(token=None)
    client = server.lock_client("admin?", token=None)
    with pytest.raises(ServerRequestError) as info:
        client.halt()
    assert info.value.code == "forbidden"
    assert server.alive
    client.ping()
    assert "halt refused" in server.log_text()


def test_an_authenticated_halt_stops_the_server_with_exit_code_0(servers):
    server = servers()
    watcher = server.lock_client("watcher")
    assert watcher.try_lock("x")
    server.lock_client("admin").halt()
    assert server.wait(10) == 0
    with pytest.raises(ServerConnectionError):
        watcher.try_lock("y")
    assert "halt requested" in server.log_text()


def test_the_halt_command(servers):
    server = servers()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "SERVER_HOST": "127.0.0.1",
        "LOCK_SERVICE_PORT": str(server.lock_port),
        "QUEUE_SERVER_TOKEN": "wrong",
    }
    command = [sys.executable, "-m", "nsj_queue_lib.server", "halt"]
    refused = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert refused.returncode == 1 and "refused our token" in refused.stderr
    assert server.alive
    env["QUEUE_SERVER_TOKEN"] = TEST_TOKEN
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert server.wait(10) == 0


# -- limits, signals, start-up errors ----------------------------------------------


def test_max_client_threads_is_enforced(servers):
    env = {**unreachable_db_env(), "MAX_CLIENT_THREADS": "3"}
    server = servers(env=env)
    clients = [server.lock_client(f"c{i}") for i in range(2)] + [server.notify_client("c2")]
    with pytest.raises(ServerConnectionError) as info:
        server.lock_client("one-too-many")
    assert "busy" in str(info.value)
    for client in clients:
        client.ping()
    assert "too many clients (MAX_CLIENT_THREADS=3)" in server.log_text()
    clients[0].close()
    late = server.lock_client("late", connect=False)
    assert late.reconnect(max_wait=5)
    late.ping()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_server_gracefully(servers, sig):
    server = servers()
    client = server.lock_client()
    listener = server.notify_client()
    listener.subscribe("fila_teste")
    assert client.try_lock("x")
    assert server.stop(sig) == 0
    with pytest.raises(ServerConnectionError):
        client.try_lock("x")
    with pytest.raises(ServerConnectionError):
        listener.wait(5)
    log = server.log_text()
    assert f"stopping (signal {signal.Signals(sig).name})" in log
    assert "check-tasks: stopped" in log and log.rstrip().endswith("stopped")


def test_a_bad_bind_variable_is_a_configuration_error(tmp_path):
    server = ServerProcess(
        tmp_path, env={**unreachable_db_env(), "QUEUE_SERVER_BIND": "not an address"}
    )
    server._spawn()
    assert server.wait(30) == 2
    assert (
        server.log_text()
        .strip()
        .splitlines()[-1]
        .startswith("nsj_queue_lib.server: invalid configuration: QUEUE_SERVER_BIND")
    )


def test_a_taken_port_exits_non_zero(servers, tmp_path):
    first = servers()
    second = ServerProcess(tmp_path / "second", lock_port=first.lock_port)
    second._spawn()
    assert second.wait(30) == 1
    assert "cannot listen" in second.log_text()
    assert first.alive


def test_notify_and_lock_ports_may_be_the_same(servers):
    port = free_port()
    server = servers(notify_port=port, lock_port=port)
    assert f"listening on 127.0.0.1:{port} (notify+lock service)" in server.log_text()
    locks, listener = server.lock_client(), server.notify_client()
    listener.subscribe("fila_teste")
    assert locks.try_lock("x")
    assert server.notify_client("sender").notify("fila_teste", "p") == 1
    assert listener.wait(5) == [("fila_teste", "p")]


def test_hello_reply_describes_the_server(servers):
    server = servers()
    sock = server.raw_socket()
    reply = hello(sock)
    assert reply == {
        "v": 1,
        "id": 0,
        "ok": True,
        "server": "nsj_queue_lib",
        "protocol": 1,
        "max_frame": protocol.MAX_FRAME_SIZE,
        "token_required": True,
    }
    assert json.loads(json.dumps(reply)) == reply
