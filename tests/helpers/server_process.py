"""The socket server as a real process (``python -m nsj_queue_lib.server``) for tests.

``ServerProcess`` starts the server on free ports with a clean environment,
waits for its "server ready" log line, and hands out clients. Its log (stderr)
goes to a file that tests can read and wait on. The ``servers`` fixture (import
it into a test module) starts servers on demand and kills whatever is left at
the end of the test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.helpers.endpoints import free_port

ROOT = Path(__file__).resolve().parents[2]
READY_LINE = "server ready"
START_TIMEOUT = 15.0
TEST_TOKEN = "test-token-0123456789abcdef"


def pg_env(dsn: str) -> dict[str, str]:
    """DB_* variables for a PostgreSQL DSN (conninfo or URI)."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    env = {
        "DB_DRIVER": "POSTGRES",
        "DB_HOST": str(params.get("host") or "127.0.0.1"),
        "DB_PORT": str(params.get("port") or 5432),
        "DB_BASE": str(params.get("dbname") or "postgres"),
        "DB_USER": str(params.get("user") or "postgres"),
    }
    if params.get("password"):
        env["DB_PASS"] = str(params["password"])
    return env


def unreachable_db_env() -> dict[str, str]:
    """A database nobody answers on: the check-tasks thread fails and backs off, sockets work."""
    return {
        "DB_DRIVER": "POSTGRES",
        "DB_HOST": "127.0.0.1",
        "DB_PORT": str(free_port()),
        "DB_BASE": "nodb",
        "DB_USER": "nobody",
        "QUEUE_NAME": "fila_teste",
        "QUEUE_TABLE": "public.fila_teste",
    }


def local_non_loopback_ip() -> str | None:
    """An address of this machine that is not loopback, or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1; no packet is sent by connect()
            address = sock.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


class ServerProcess:
    def __init__(
        self,
        directory: Path,
        env: Mapping[str, str] | None = None,
        token: str | None = TEST_TOKEN,
        notify_port: int | None = None,
        lock_port: int | None = None,
        timeout_socket_message: float = 1.0,
    ):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.token = token
        self._fixed_ports = notify_port is not None or lock_port is not None
        self.notify_port = notify_port or free_port()
        self.lock_port = lock_port or free_port()
        self.extra_env = dict(env or unreachable_db_env())
        self.timeout_socket_message = timeout_socket_message
        self.proc: subprocess.Popen | None = None
        self.log_path = self.directory / "server.log"
        self._log_file = None
        self._clients: list = []
        self.starts = 0
        self._log_offset = 0

    # -- process --------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        env.update(
            {
                "QUEUE_NAME": "fila_teste",
                "QUEUE_TABLE": "public.fila_teste",
                "NOTIFY_SERVICE_PORT": str(self.notify_port),
                "LOCK_SERVICE_PORT": str(self.lock_port),
                "TIMEOUT_SOCKET_MESSAGE": str(self.timeout_socket_message),
                "CHECK_TASKS_INTERVAL": "15",
                "LOG_DEBUG": "false",
                "QUEUE_SERVER_BIND": "127.0.0.1",
            }
        )
        if self.token is not None:
            env["QUEUE_SERVER_TOKEN"] = self.token
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = START_TIMEOUT) -> ServerProcess:
        for attempt in range(3):
            self._spawn()
            if self._wait_ready(timeout):
                return self
            log = self.log_text()
            if "Address already in use" in log and not self._fixed_ports and attempt < 2:
                self.notify_port, self.lock_port = free_port(), free_port()
                continue
            self.kill()
            raise AssertionError(
                f"the server did not start (exit code {self.proc.returncode}):\n{log}"
            )
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        self.starts += 1
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nsj_queue_lib.server"],
            cwd=ROOT,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if READY_LINE in self.log_text(since_start=True):
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.02)
        return False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        """Send ``sig`` and wait; returns the exit code."""
        if self.alive:
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout: float = 10.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
        if self.proc is not None:
            try:
                self.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def restart(self) -> ServerProcess:
        """Stop (SIGTERM) and start again on the same ports."""
        self.stop()
        self._fixed_ports = True
        return self.start()

    def cleanup(self) -> None:
        for client in self._clients:
            try:
                client.close()
            except Exception:  # best effort: the client may be closed already
                pass
        self.kill()

    # -- log --------------------------------------------------------------------

    def log_text(self, since_start: bool = False) -> str:
        if not self.log_path.exists():
            return ""
        data = self.log_path.read_bytes()
        if since_start:
            data = data[self._log_offset :]
        return data.decode("utf-8", "replace")

    def wait_for_log(self, text: str, timeout: float = 10.0, count: int = 1) -> bool:
        """True once ``text`` appears ``count`` times in the log of the current run."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.log_text(since_start=True).count(text) >= count:
                return True
            time.sleep(0.02)
        return False

    # -- clients ----------------------------------------------------------------

    def _client(
        self,
        service: str,
        name: str = "test",
        token="default",
        timeout: float = 5.0,
        connect: bool = True,
        port: int | None = None,
    ):
        from nsj_queue_lib.client import LockClient, NotifyClient

        cls, own_port = {
            "lock": (LockClient, self.lock_port),
            "notify": (NotifyClient, self.notify_port),
        }[service]
        token = self.token if token == "default" else token
        client = cls("127.0.0.1", port or own_port, token, name, timeout, connect=connect)
        self._clients.append(client)
        return client

    def lock_client(self, name: str = "test", **options):
        """A ``LockClient`` of this server (options: token, timeout, connect, port)."""
        return self._client("lock", name, **options)

    def notify_client(self, name: str = "test", **options):
        """A ``NotifyClient`` of this server (options: token, timeout, connect, port)."""
        return self._client("notify", name, **options)

    def raw_socket(self, port: int | None = None, timeout: float = 5.0) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port or self.lock_port), timeout=timeout)
        self._clients.append(sock)
        return sock


def read_until_closed(sock: socket.socket, timeout: float = 5.0) -> tuple[list[dict], bool]:
    """(frames the server sent, whether it closed the connection within ``timeout``)."""
    from nsj_queue_lib import protocol

    decoder = protocol.FrameDecoder()
    deadline = time.monotonic() + timeout
    closed = False
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(65536)
        except TimeoutError:
            break
        except OSError:  # reset: closed
            closed = True
            break
        if not data:
            closed = True
            break
        decoder.feed(data)
    frames = []
    try:
        while (message := decoder.next_message()) is not None:
            frames.append(message)
    except protocol.ProtocolError:
        pass
    return frames, closed


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


@pytest.fixture
def servers(tmp_path) -> Iterator:
    """``servers(**kwargs)`` starts a ``ServerProcess``; all are killed after the test."""
    started: list[ServerProcess] = []

    def start(**kwargs) -> ServerProcess:
        server = ServerProcess(tmp_path / f"server{len(started)}", **kwargs)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.cleanup()
