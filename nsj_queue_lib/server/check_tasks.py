"""The check-tasks thread: wakes the queue's subscribers when work is ready.

Every ``CHECK_TASKS_INTERVAL`` seconds it asks the database whether the
queue has ready tasks and, if so, notifies the subscribers of ``QUEUE_NAME``
(payload ``""``). Where the database pushes (PostgreSQL LISTEN on the
queue's channel) it also relays every notification at once, payload
included, so ``NOTIFY <queue>, 'HALT'`` reaches workers that listen through
the server. Where it cannot push (MySQL, MariaDB, SingleStore), it checks the
running tasks for cancel requests every CANCEL_CHECK_SECONDS and pushes
``cancel:<id>`` for each new one. Best-effort: a database error closes the connections, is logged,
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

from nsj_queue_lib.cancel_notice import cancel_payload
from nsj_queue_lib.db.driver import TaskSource

INITIAL_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 30.0
# Where the database has no LISTEN: how often running tasks are checked for cancel requests,
# pushed to the workers as "cancel:<id>" (workers then only check every 5 s themselves).
CANCEL_CHECK_SECONDS = 1.0


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
        next_poll = next_cancel_check = time.monotonic()
        announced: set[int] = set()
        while not self._stop_event.is_set():
            now = time.monotonic()
            if now >= next_poll:
                ready = source.has_ready_tasks()
                self._healthy = True
                if ready:
                    self._log.debug("check-tasks: ready tasks found; notifying %r", self.queue_name)
                    self._publish(self.queue_name, "")
                next_poll = now + self.interval
            if not source.supports_listen and now >= next_cancel_check:
                announced = self._announce_cancels(source, announced)
                next_cancel_check = now + CANCEL_CHECK_SECONDS
            until = next_poll if source.supports_listen else min(next_poll, next_cancel_check)
            payloads = source.wait(until - time.monotonic(), self._wake_r.fileno())
            self._drain_wake()
            # Identical notifications arriving together are merged.
            for payload in dict.fromkeys(payloads):
                if payload == "HALT":
                    self._log.info("check-tasks: relaying NOTIFY %r 'HALT'", self.queue_name)
                self._log.debug(
                    "check-tasks: relaying NOTIFY %r payload %r", self.queue_name, payload
                )
                self._publish(self.queue_name, payload)

    def _announce_cancels(self, source: TaskSource, announced: set[int]) -> set[int]:
        """Push ``cancel:<id>`` for each running attempt newly found with a cancel request
        (where the database cannot notify); the ids still requested, announced once."""
        requested = set(source.cancel_requests())
        for task_id in sorted(requested - announced):
            self._log.debug("check-tasks: task %s was cancelled; notifying", task_id)
            self._publish(self.queue_name, cancel_payload(task_id))
        return requested

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(64):
                pass
        except OSError:
            pass
