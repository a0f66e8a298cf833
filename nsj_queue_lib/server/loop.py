"""``QueueServer``: one selectors event loop for every client connection.

No thread per client. The loop accepts connections on the notify and lock
ports, reads frames, answers requests, pushes notifications to subscribers
and enforces the limits:

- at most ``max_clients`` connections at once (a connection over the limit
  gets a ``busy`` error frame and is closed);
- a ``hello`` (with the token, when one is configured) must arrive within
  ``message_timeout`` seconds of connecting, and any frame must be complete
  within ``message_timeout`` seconds of its first byte;
- garbage, an oversized frame, a wrong version, or anything but ``hello``
  before authentication closes that one connection and nothing else;
- a client that does not read its notifications is dropped once
  ``MAX_OUTPUT_BYTES`` are waiting for it.

Locks are owned by connections and released the moment their connection
closes. Other threads (the check-tasks thread, signal handlers) talk to the
loop only through ``publish`` and ``stop``, which wake it through a socket
pair.
"""

from __future__ import annotations

import collections
import errno
import hmac
import itertools
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from nsj_queue_lib import protocol
from nsj_queue_lib.db.dialect import notify_channel
from nsj_queue_lib.db.driver import TaskSource
from nsj_queue_lib.server.check_tasks import CheckTasksThread
from nsj_queue_lib.server.config import ServerConfig
from nsj_queue_lib.server.connection import (
    LINGER_SECONDS,
    MAX_ACCEPTS_PER_ROUND,
    MAX_CLIENT_NAME_LENGTH,
    MAX_LINGERING,
    MAX_OUTPUT_BYTES,
    RECV_SIZE,
    SERVER_NAME,
    BadRequest,
    Connection,
    peer_name,
    set_keepalive,
)
from nsj_queue_lib.server.locks import LockTable
from nsj_queue_lib.server.operations import Operations


class QueueServer:
    def __init__(
        self,
        config: ServerConfig,
        source_factory: Callable[[], TaskSource] | None = None,
        logger: logging.Logger | None = None,
    ):
        self.config = config
        self._log = logger or logging.getLogger("nsj_queue_lib.server")
        self._source_factory = source_factory
        self._selector: selectors.BaseSelector | None = None
        self._listeners: list[socket.socket] = []
        self._conns: dict[int, Connection] = {}
        self._lingering: dict[int, Connection] = {}
        self._subscribers: dict[str, set[Connection]] = collections.defaultdict(set)
        self._locks = LockTable()
        self._ids = itertools.count(1)
        self._inbox: collections.deque[tuple[str, str]] = collections.deque()
        self._stop_requested = False
        self._stop_reason = ""
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._check_tasks: CheckTasksThread | None = None
        self.addresses: dict[str, tuple[str, int]] = {}
        self._ops = Operations(
            self._locks, self._subscribers, self._log, self._fan_out, self.stop
        ).table()

    # -- life cycle ---------------------------------------------------------

    def start(self) -> None:
        """Bind the listeners and start the check-tasks thread (OSError when a port is taken)."""
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        services = [("notify", self.config.notify_port), ("lock", self.config.lock_port)]
        if self.config.notify_port == self.config.lock_port:
            services = [("notify+lock", self.config.notify_port)]
        host = self.config.bind_host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            for service, port in services:
                sock = socket.create_server((host, port), family=family, backlog=128)
                sock.setblocking(False)
                self._listeners.append(sock)
                self._selector.register(sock, selectors.EVENT_READ, ("listener", service))
                bound = sock.getsockname()
                self.addresses[service] = (bound[0], bound[1])
        except OSError:
            self._close_listeners()
            raise
        for warning in self.config.warnings:
            self._log.warning("%s", warning)
        for service, (bound_host, port) in self.addresses.items():
            self._log.info("listening on %s:%d (%s service)", bound_host, port, service)
        self._log.info(
            "authentication: %s; at most %d clients; message timeout %gs",
            "token required" if self.config.token is not None else "no token (loopback only)",
            self.config.max_clients,
            self.config.message_timeout,
        )
        if self._source_factory is not None:
            self._check_tasks = CheckTasksThread(
                self._source_factory,
                self.config.queue_name,
                self.config.check_tasks_interval,
                self.publish,
                self._log.getChild("check_tasks"),
            )
            self._check_tasks.start()

    def stop(self, reason: str = "stop requested") -> None:
        """Ask the loop to stop; safe from any thread and from a signal handler."""
        if not self._stop_requested:
            self._stop_reason = reason
        self._stop_requested = True
        self._wake()

    def publish(self, queue: str, payload: str = "") -> None:
        """Notify the subscribers of ``queue``; safe from any thread."""
        self._inbox.append((queue, payload))
        self._wake()

    def _wake(self) -> None:
        if self._wake_w is None:
            return
        try:
            self._wake_w.send(b"\0")
        except OSError:  # buffer full: a wake-up is already pending
            pass

    def serve_forever(self) -> None:
        if self._selector is None:
            raise RuntimeError("start() first")
        self._log.info("server ready")
        try:
            while not self._stop_requested:
                events = self._selector.select(self._select_timeout())
                for key, mask in events:
                    data = key.data
                    if data == "wake":
                        self._drain_wake()
                    elif isinstance(data, tuple):
                        self._accept(cast(socket.socket, key.fileobj), data[1])
                    elif not data.closed:
                        if mask & selectors.EVENT_WRITE:
                            self._flush(data)
                        if mask & selectors.EVENT_READ and not data.closed:
                            self._on_readable(data)
                self._deliver_inbox()
                self._expire(time.monotonic())
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        self._log.info(
            "stopping (%s): closing %d clients", self._stop_reason or "stop", len(self._conns)
        )
        if self._check_tasks is not None:
            self._check_tasks.stop()
        self._close_listeners()
        for conn in list(self._conns.values()) + list(self._lingering.values()):
            if conn.out and not conn.closed:
                try:
                    conn.sock.send(conn.out)
                except OSError:
                    pass
            self._close(conn, "server stopping")
        if self._check_tasks is not None:
            self._check_tasks.join(timeout=10)
            self._check_tasks.close()
        if self._selector is not None:
            self._selector.close()
        for sock in (self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        self._wake_w = None
        self._log.info("stopped")

    def _close_listeners(self) -> None:
        for sock in self._listeners:
            if self._selector is not None:
                try:
                    self._selector.unregister(sock)
                except (KeyError, ValueError):
                    pass
            sock.close()
        self._listeners = []

    def _running_selector(self) -> selectors.BaseSelector:
        if self._selector is None:
            raise RuntimeError("the server loop is not running")
        return self._selector

    def _drain_wake(self) -> None:
        if self._wake_r is None:
            return
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _select_timeout(self) -> float | None:
        if self._inbox:
            return 0
        deadline = None
        for conn in self._lingering.values():
            until = conn.lingering_until
            if until is not None and (deadline is None or until < deadline):
                deadline = until
        for conn in self._conns.values():
            for d in self._deadlines(conn):
                if deadline is None or d < deadline:
                    deadline = d
        if deadline is None:
            return None
        return max(0.0, deadline - time.monotonic()) + 0.001

    def _deadlines(self, conn: Connection):
        if not conn.authenticated:
            yield conn.hello_deadline
        if conn.decoder.frame_started is not None:
            yield conn.decoder.frame_started + self.config.message_timeout

    def _expire(self, now: float) -> None:
        for conn in list(self._lingering.values()):
            if conn.lingering_until is not None and now >= conn.lingering_until:
                self._close(conn, "refused")
        timeout = self.config.message_timeout
        for conn in list(self._conns.values()):
            if not conn.authenticated and now >= conn.hello_deadline:
                self._abort(conn, "timeout", f"no hello within {timeout:g}s")
            elif (
                conn.decoder.frame_started is not None
                and now >= conn.decoder.frame_started + timeout
            ):
                self._abort(conn, "timeout", f"incomplete frame for {timeout:g}s")

    # -- connections --------------------------------------------------------

    def _accept(self, listener: socket.socket, service: str) -> None:
        for _ in range(MAX_ACCEPTS_PER_ROUND):
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. EMFILE: out of file descriptors
                self._log.error("accept on the %s service failed: %s", service, exc)
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    time.sleep(0.05)  # the listener stays readable: do not spin on it
                return
            sock.setblocking(False)
            set_keepalive(sock, self.config.keepalive_idle)
            cid = next(self._ids)
            now = time.monotonic()
            conn = Connection(
                cid, sock, peer_name(addr), service, now + self.config.message_timeout
            )
            self._running_selector().register(sock, selectors.EVENT_READ, conn)
            if len(self._conns) >= self.config.max_clients:
                self._log.warning(
                    "refused %s on the %s service: too many clients (MAX_CLIENT_THREADS=%d)",
                    conn.label(),
                    service,
                    self.config.max_clients,
                )
                self._refuse(
                    conn,
                    "busy",
                    f"too many clients (at most {self.config.max_clients}); retry later",
                    None,
                )
                continue
            self._conns[cid] = conn
            self._log.info(
                "accepted %s on the %s service (%d clients)",
                conn.label(),
                service,
                len(self._conns),
            )

    def _on_readable(self, conn: Connection) -> None:
        try:
            data = conn.sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, f"receive failed: {exc.strerror or exc}")
            return
        if not data:
            self._close(conn, "closed by the client" if conn.lingering_until is None else "refused")
            return
        if conn.lingering_until is not None:
            return  # refused: input is discarded until the linger ends
        conn.decoder.feed(data)
        while not conn.closed and conn.lingering_until is None:
            try:
                message = conn.decoder.next_message()
            except protocol.FrameTooLarge as exc:
                self._abort(conn, "frame_too_large", str(exc))
                return
            except protocol.UnsupportedVersion as exc:
                self._abort(conn, "unsupported_version", str(exc))
                return
            except protocol.ProtocolError as exc:
                self._abort(conn, "protocol_error", str(exc))
                return
            if message is None:
                return
            self._handle(conn, message)

    def _close(self, conn: Connection, reason: str, level: int = logging.INFO) -> None:
        if conn.closed:
            return
        conn.closed = True
        released = self._release(conn)
        self._conns.pop(conn.id, None)
        self._lingering.pop(conn.id, None)
        try:
            self._running_selector().unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        try:
            conn.sock.close()
        except OSError:
            pass
        if level is not None:
            extra = f"; released {len(released)} lock(s)" if released else ""
            self._log.log(level, "closed %s: %s%s", conn.label(), reason, extra)

    def _release(self, conn: Connection) -> list[str]:
        released = self._locks.release_all(conn.id)
        for queue in conn.queues:
            subscribers = self._subscribers.get(queue)
            if subscribers is not None:
                subscribers.discard(conn)
                if not subscribers:
                    del self._subscribers[queue]
        conn.queues.clear()
        return released

    def _abort(self, conn: Connection, code: str, message: str) -> None:
        """A misbehaving connection: one error frame (best effort), then close it at once."""
        frame = protocol.encode({"id": None, "ok": False, "error": code, "message": message})
        try:
            conn.sock.send(conn.out + frame if conn.out else frame)
        except OSError:
            pass
        conn.out.clear()
        self._close(conn, f"{code}: {message}", level=logging.WARNING)

    def _refuse(self, conn: Connection, code: str, message: str, rid: Any) -> None:
        """Answer with an error, stop writing, and keep the socket briefly so the reason is read."""
        released = self._release(conn)
        self._conns.pop(conn.id, None)
        if len(self._lingering) >= MAX_LINGERING:
            self._abort(conn, code, message)
            return
        conn.lingering_until = time.monotonic() + LINGER_SECONDS
        self._lingering[conn.id] = conn
        conn.shutdown_after_flush = True
        if released:
            self._log.info("%s: released %d lock(s)", conn.label(), len(released))
        self._send(
            conn, protocol.encode({"id": rid, "ok": False, "error": code, "message": message})
        )

    # -- output ---------------------------------------------------------------

    def _send(self, conn: Connection, frame: bytes) -> None:
        if conn.closed:
            return
        if len(conn.out) + len(frame) > MAX_OUTPUT_BYTES:
            conn.out.clear()
            self._close(
                conn,
                f"more than {MAX_OUTPUT_BYTES} bytes unread (client not reading)",
                level=logging.WARNING,
            )
            return
        conn.out += frame
        self._flush(conn)

    def _flush(self, conn: Connection) -> None:
        while conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.ECONNRESET):
                    self._close(conn, "connection reset by the client")
                else:
                    self._close(conn, f"send failed: {exc.strerror or exc}")
                return
            del conn.out[:sent]
        if not conn.out and conn.shutdown_after_flush:
            conn.shutdown_after_flush = False
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        wanted = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0)
        if wanted != conn.events:
            conn.events = wanted
            self._running_selector().modify(conn.sock, wanted, conn)

    def _reply(self, conn: Connection, rid: Any, **fields: Any) -> None:
        self._send(conn, protocol.encode({"id": rid, "ok": True, **fields}))

    def _error(self, conn: Connection, rid: Any, code: str, message: str) -> None:
        self._send(
            conn, protocol.encode({"id": rid, "ok": False, "error": code, "message": message})
        )

    # -- notifications --------------------------------------------------------

    def _deliver_inbox(self) -> None:
        while self._inbox:
            queue, payload = self._inbox.popleft()
            self._fan_out(queue, payload)

    def _fan_out(self, queue: str, payload: str) -> int:
        key = notify_channel(queue)
        subscribers = self._subscribers.get(key)
        if not subscribers:
            return 0
        frame = protocol.encode({"op": "notify", "queue": key, "payload": payload})
        delivered = 0
        for conn in list(subscribers):
            self._send(conn, frame)
            if not conn.closed:
                delivered += 1
        if payload == "HALT":
            self._log.info("notified %d subscriber(s) of %r: HALT", delivered, key)
        else:
            self._log.debug("notified %d subscriber(s) of %r (payload %r)", delivered, key, payload)
        return delivered

    # -- requests -------------------------------------------------------------

    def _handle(self, conn: Connection, message: dict[str, Any]) -> None:
        op = message.get("op")
        rid = message.get("id")
        if rid is not None and (isinstance(rid, bool) or not isinstance(rid, (int, str))):
            rid = None
        if not conn.authenticated:
            if op != "hello":
                what = "halt" if op == "halt" else f"{op!r}"
                self._log.warning("%s: %s before hello refused", conn.label(), what)
                self._refuse(conn, "unauthenticated", "the first message must be hello", rid)
                return
            self._hello(conn, message, rid)
            return
        handler = self._ops.get(op) if isinstance(op, str) else None
        if handler is None:
            self._error(conn, rid, "unknown_op", f"unknown operation {op!r}")
            return
        try:
            result = handler(conn, message)
        except BadRequest as exc:
            self._error(conn, rid, exc.code, exc.message)
            return
        if result is not None and not conn.closed:
            self._reply(conn, rid, **result)

    def _hello(self, conn: Connection, message: dict[str, Any], rid: Any) -> None:
        client = message.get("client")
        if isinstance(client, str) and client.strip():
            conn.client = client.strip()[:MAX_CLIENT_NAME_LENGTH]
        conn.client = conn.client.encode("ascii", "backslashreplace").decode("ascii")
        expected = self.config.token
        if expected is not None:
            token = message.get("token")
            if not isinstance(token, str) or token == "":
                reason = "no token"
            elif not hmac.compare_digest(
                token.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
            ):
                reason = "wrong token"
            else:
                reason = None
            if reason is not None:
                self._log.warning(
                    "%s (client %r): authentication failed (%s)", conn.label(), conn.client, reason
                )
                self._refuse(conn, "unauthorized", "authentication failed", rid)
                return
        conn.authenticated = True
        conn.admin = expected is not None
        self._log.info(
            "%s: hello on the %s service (%s)",
            conn.label(),
            conn.service,
            "authenticated with the token" if conn.admin else "no token configured",
        )
        self._reply(
            conn,
            rid,
            server=SERVER_NAME,
            protocol=protocol.VERSION,
            max_frame=protocol.MAX_FRAME_SIZE,
            token_required=expected is not None,
        )


def run_thread(server: QueueServer) -> threading.Thread:
    """Start ``server`` and run its loop in a thread (for embedding and tests)."""
    server.start()
    thread = threading.Thread(target=server.serve_forever, name="queue-server", daemon=True)
    thread.start()
    return thread
