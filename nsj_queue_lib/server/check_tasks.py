"""The check-tasks thread: wakes the queue's subscribers when work is ready.

Every ``CHECK_TASKS_INTERVAL`` seconds it asks the database whether the
queue has ready tasks and, if so, notifies the subscribers of ``QUEUE_NAME``
(payload ``""``). Where the database pushes (PostgreSQL LISTEN on the
queue's channel) it also relays every notification at once, payload
included, so ``NOTIFY <queue>, 'HALT'`` reaches workers that listen through
the server. Best-effort: a database error closes the connections, is logged,
and the thread reconnects after a growing back-off (0.5 s doubling to 30 s);
the socket server keeps serving meanwhile.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from collections.abc import Callable

from nsj_queue_lib.db.driver import TaskSource

INITIAL_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 30.0


class CheckTasksThread(threading.Thread):
    def __init__(
        self,
        source_factory: Callable[[], TaskSource],
        queue_name: str,
        interval: float,
        publish: Callable[[str, str], None],
        logger: logging.Logger,
    ):
        super().__init__(name="check-tasks", daemon=True)
        self._factory = source_factory
        self.queue_name = queue_name
        self.interval = interval
        self._publish = publish
        self._log = logger
        self._stop_event = threading.Event()
        self._healthy = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

    def stop(self) -> None:
        self._stop_event.set()
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass

    def close(self) -> None:
        for sock in (self._wake_r, self._wake_w):
            sock.close()

    def run(self) -> None:
        delay = INITIAL_BACKOFF_SECONDS
        while not self._stop_event.is_set():
            source = None
            failure = None
            try:
                source = self._factory()
                source.open()
                self._log.info(
                    "check-tasks: connected; polling every %gs%s",
                    self.interval,
                    f", listening on channel {getattr(source, 'channel', self.queue_name)!r}"
                    if source.supports_listen
                    else " (no LISTEN on this database)",
                )
                self._serve(source)
            except Exception as exc:  # noqa: BLE001 - best effort: log and reconnect
                failure = exc
            finally:
                if source is not None:
                    source.close()
            if failure is None or self._stop_event.is_set():
                continue
            if self._healthy:
                delay = INITIAL_BACKOFF_SECONDS
                self._healthy = False
            pause = delay * (0.75 + random.random() / 2)
            first_line = (str(failure).strip().splitlines() or [type(failure).__name__])[0]
            self._log.warning("check-tasks: %s; reconnecting in %.1fs", first_line, pause)
            self._stop_event.wait(pause)
            delay = min(delay * 2, MAX_BACKOFF_SECONDS)
        self._log.info("check-tasks: stopped")

    def _serve(self, source: TaskSource) -> None:
        # The back-off starts over only once a poll succeeded, so a query
        # that keeps failing (a missing table) is retried ever more slowly.
        self._healthy = False
        next_poll = time.monotonic()
        while not self._stop_event.is_set():
            now = time.monotonic()
            if now >= next_poll:
                ready = source.has_ready_tasks()
                self._healthy = True
                if ready:
                    self._log.debug("check-tasks: ready tasks found; notifying %r", self.queue_name)
                    self._publish(self.queue_name, "")
                next_poll = now + self.interval
            payloads = source.wait(next_poll - time.monotonic(), self._wake_r.fileno())
            self._drain_wake()
            # Identical notifications arriving together are merged.
            for payload in dict.fromkeys(payloads):
                if payload == "HALT":
                    self._log.info("check-tasks: relaying NOTIFY %r 'HALT'", self.queue_name)
                self._log.debug(
                    "check-tasks: relaying NOTIFY %r payload %r", self.queue_name, payload
                )
                self._publish(self.queue_name, payload)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(64):
                pass
        except OSError:
            pass
