"""A small HTTP server for a worker's endpoints (stdlib ``ThreadingHTTPServer``).

Each request runs in a daemon thread with a socket timeout, so a slow or
stuck client never holds the worker: ``close()`` returns within the serve
loop's poll interval and the process exits without waiting for requests.
Routes map a path to a function of the request's ``Accept`` header that
returns (status, content type, body).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from nsj_queue_lib.log import get_logger

logger = get_logger("endpoints")

Response = tuple[int, str, bytes]
Route = Callable[[str], Response]
REQUEST_TIMEOUT_SECONDS = 10.0
POLL_INTERVAL_SECONDS = 0.2


class EndpointServerError(Exception):
    """The port cannot be listened on."""


def _handler_class(routes: Mapping[str, Route]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_SECONDS
        server_version = "nsj_queue_lib"

        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                status, content_type, body = 404, "text/plain; charset=utf-8", b"not found\n"
            else:
                try:
                    status, content_type, body = route(self.headers.get("Accept", ""))
                except Exception:  # logged: one failed request must not end the server
                    logger.exception("endpoint %s failed", self.path)
                    status, content_type, body = 500, "text/plain; charset=utf-8", b"error\n"
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            logger.debug("%s %s", self.address_string(), format % args)

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class EndpointServer:
    def __init__(self, port: int, routes: Mapping[str, Route], host: str = ""):
        self.port = port
        self.host = host
        self._routes = routes
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Listen and serve in a daemon thread; ``EndpointServerError`` when the port is taken."""
        try:
            self._server = _Server((self.host, self.port), _handler_class(self._routes))
        except OSError as exc:
            raise EndpointServerError(
                f"QUEUE_METRICS_PORT: cannot listen on port {self.port}: {exc.strerror or exc}"
            ) from exc
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": POLL_INTERVAL_SECONDS},
            name="nsj-endpoints",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._server = None
