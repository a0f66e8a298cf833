"""A real HTTP server on 127.0.0.1 (free port) that records what it receives.

Used by the webhook tests: the library's HTTP client talks to it over a real
socket, so what "arrived" is what a subscriber's endpoint would see.

    with RecordingServer() as server:
        server.route("/hook", statuses=[500, 200])        # 500 first, then 200 forever
        server.route("/slow", delays=[2.0, 0])            # the first answer waits 2 s
        server.route("/moved", statuses=[302], headers={"Location": server.url("/target")})
        server.route("/big", body_size=20 * 1024 * 1024)  # a 20 MiB body
        server.route("/drip", drip_interval=0.1, drip_seconds=3)  # one byte every 0.1 s
        ...
        server.requests                                   # every request, in arrival order

Every request is recorded (method, path with its query string, headers, body,
client port) *before* the route's delay, so a request that timed out on the
client side is still seen. Paths without a route answer 200 with ``ok``.
Handlers sleep on an event, so ``close()`` never waits for a long delay.
The server speaks HTTP/1.1 with keep-alive: connection reuse is visible in
``client_port``.
"""

from __future__ import annotations

import dataclasses
import http.server
import threading
import time
import urllib.parse
from typing import Any

DEFAULT_BODY = b"ok"
_CHUNK = 64 * 1024


@dataclasses.dataclass
class RecordedRequest:
    method: str
    path: str  # as sent: path and query string
    headers: list[tuple[str, str]]
    body: bytes
    client_port: int
    received_at: float

    @property
    def route(self) -> str:
        """The path without its query string."""
        return urllib.parse.urlsplit(self.path).path

    @property
    def query(self) -> str:
        return urllib.parse.urlsplit(self.path).query

    def header(self, name: str) -> str | None:
        """The value of a header (case-insensitive), or None."""
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def header_names(self) -> set[str]:
        return {key.lower() for key, _ in self.headers}


@dataclasses.dataclass
class Route:
    statuses: list[int] = dataclasses.field(default_factory=lambda: [200])
    delays: list[float] = dataclasses.field(default_factory=lambda: [0.0])
    body: bytes = DEFAULT_BODY
    body_size: int | None = None  # a generated body of this many bytes instead of ``body``
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    content_type: str = "text/plain; charset=utf-8"
    drip_interval: float | None = None  # send the body one byte at a time at this interval...
    drip_seconds: float = 0.0  # ...for this long, then close the connection
    drip_headers: bool = (
        False  # drip inside the header block instead (the status line is sent first)
    )
    hits: int = 0
    bytes_sent: int = 0

    def next_answer(self) -> tuple[int, float]:
        """(status, delay) of the next request: each list advances, its last item repeats."""
        index = self.hits
        self.hits += 1
        status = self.statuses[min(index, len(self.statuses) - 1)]
        delay = self.delays[min(index, len(self.delays) - 1)]
        return status, delay


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(data)
                data.extend(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        owner: RecordingServer = self.server.owner
        body = self._read_body()
        route_path = urllib.parse.urlsplit(self.path).path
        with owner.lock:
            route = owner.routes.get(route_path) or Route()
            status, delay = route.next_answer()
            owner.requests.append(
                RecordedRequest(
                    method=self.command,
                    path=self.path,
                    headers=list(self.headers.items()),
                    body=body,
                    client_port=self.client_address[1],
                    received_at=time.monotonic(),
                )
            )
            owner.changed.notify_all()
        if delay and owner.stopping.wait(delay):
            self.close_connection = True
            return
        try:
            self._answer(route, status)
        except (
            TimeoutError,
            BrokenPipeError,
            ConnectionResetError,
            ConnectionAbortedError,
            OSError,
        ):
            self.close_connection = True

    def _drip(self, route: Route) -> None:
        owner: RecordingServer = self.server.owner
        deadline = time.monotonic() + route.drip_seconds
        while time.monotonic() < deadline and not owner.stopping.is_set():
            self.wfile.write(b"x")
            self.wfile.flush()
            with owner.lock:
                route.bytes_sent += 1
            owner.stopping.wait(route.drip_interval)

    def _answer(self, route: Route, status: int) -> None:
        if route.drip_interval is not None and route.drip_headers:
            # A header whose value never ends: the response is never complete.
            self.wfile.write(f"HTTP/1.1 {status} OK\r\nX-Slow: ".encode())
            self._drip(route)
            self.close_connection = True
            return
        self.send_response(status)
        for name, value in route.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", route.content_type)
        owner: RecordingServer = self.server.owner
        if route.drip_interval is not None:
            self.send_header("Content-Length", str(10 * 1024 * 1024))
            self.end_headers()
            self.wfile.flush()
            self._drip(route)
            self.close_connection = True
            return
        if self.command == "HEAD":
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        size = route.body_size if route.body_size is not None else len(route.body)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if route.body_size is None:
            self.wfile.write(route.body)
            with owner.lock:
                route.bytes_sent += len(route.body)
            return
        chunk = b"x" * _CHUNK
        remaining = size
        while remaining > 0 and not owner.stopping.is_set():
            piece = chunk[: min(_CHUNK, remaining)]
            self.wfile.write(piece)
            remaining -= len(piece)
            with owner.lock:
                route.bytes_sent += len(piece)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_TRACE = do_HEAD = do_OPTIONS = _handle


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    owner: RecordingServer


class RecordingServer:
    """Starts at construction; ``close()`` (or the ``with`` block's end) stops it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.stopping = threading.Event()
        self.routes: dict[str, Route] = {}
        self.requests: list[RecordedRequest] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="recording-http",
            daemon=True,
        )
        self._thread.start()

    def __enter__(self) -> RecordingServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def route(self, path: str, **options: Any) -> Route:
        """Configure the answers for ``path`` (without query string); see ``Route``."""
        route = Route(**options)
        with self.lock:
            self.routes[path] = route
        return route

    def requests_to(self, path: str) -> list[RecordedRequest]:
        with self.lock:
            return [r for r in self.requests if r.route == path]

    def snapshot(self) -> list[RecordedRequest]:
        with self.lock:
            return list(self.requests)

    def wait_for_requests(
        self, count: int, timeout: float = 10.0, path: str | None = None
    ) -> list[RecordedRequest]:
        """Wait until at least ``count`` requests (to ``path``, if given) arrived; return them."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                seen = [r for r in self.requests if path is None or r.route == path]
                if len(seen) >= count:
                    return seen
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"expected {count} request(s) to {path or 'any path'}, got {len(seen)}"
                    )
                self.changed.wait(remaining)

    def close(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
