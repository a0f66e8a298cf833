"""``wait_for_task``'s push through the socket server (CLIENT_SERVER_MODE), for databases
without LISTEN (MySQL, MariaDB): the same protocol as PostgreSQL's end trigger
(db/postgres/task_end.py), with the server's locks and notifications.

- The waiter (``ServerEndWaiter``) says it waits by holding the server lock
  ``end_lock_name(queue, first id)`` and listens on the queue's end channel
  (``task_end_channel``); its looks read the database as polling's do.
- The worker (``EndAnnouncer``, an observer of outcomes with a thread of its own) asks
  the server, after its tasks ended, which of their end locks are held (one ``held``
  request for all it has), and notifies those ids on the channel. Tasks nobody waits
  for cost that one request per batch and no notification.

A notification can come before the end is visible (the worker's observer is told at its
commit) or be lost (a reconnect): the waiter's looks go on every ``PUSHED_INTERVAL`` as
on PostgreSQL. Two waiters of one task: the second cannot take the lock and polls.
"""

from __future__ import annotations

import collections
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from nsj_queue_lib.client.channel import ServerConnectionError
from nsj_queue_lib.db.dialect import task_end_channel
from nsj_queue_lib.identifiers import split_table_name
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.observability.observer import Observer

if TYPE_CHECKING:
    from nsj_queue_lib.client.lock_client import LockClient
    from nsj_queue_lib.client.notify_client import NotifyClient
    from nsj_queue_lib.model import TaskRecord
    from nsj_queue_lib.settings import Settings

logger = get_logger("server_ends")

# The ids one notification carries at most (the server's payloads are bounded).
IDS_PER_NOTIFICATION = 400
# How long the announcer lets ends gather after a request (a waiter's wake-up may be
# that much later).
BATCH_SECONDS = 0.005
# The lock names one "held" request asks about (the server takes up to 10,000).
NAMES_PER_LOOK = 5_000
# How many ended ids the announcer keeps at most while the server is unreachable.
MAX_PENDING = 100_000


def end_lock_name(queue_table: str, first_id: int) -> str:
    """The server lock a waiter of the task ``first_id`` holds."""
    return f"nsjq-end:{split_table_name(queue_table)[1]}:{int(first_id)}"


def end_channel(queue_table: str) -> str:
    return task_end_channel(split_table_name(queue_table)[1])


class ServerEndWaiter:
    """One wait for one task's end through the server (``waiting.wait_pushed``'s waiter).
    ``look()`` reads the task's latest attempt (None: unknown), as polling's looks do."""

    def __init__(
        self,
        locks: LockClient,
        notices: NotifyClient,
        queue_table: str,
        look: Callable[[], Mapping[str, Any] | None],
    ) -> None:
        self._locks = locks
        self._notices = notices
        self._table = queue_table
        self._look = look
        self._name: str | None = None
        self._first_id: int | None = None
        self._subscribed = False

    @classmethod
    def open(
        cls, settings: Settings, queue_table: str, look: Callable[[], Mapping[str, Any] | None]
    ) -> ServerEndWaiter:
        """A waiter with connections of its own to the server ``settings`` names
        (SERVER_HOST, LOCK_SERVICE_PORT, NOTIFY_SERVICE_PORT, QUEUE_SERVER_TOKEN), opened
        by ``register``: a task that ends within polling's first look never connects."""
        from nsj_queue_lib.client.lock_client import LockClient
        from nsj_queue_lib.client.notify_client import NotifyClient

        name = f"wait_for_task:{socket.gethostname()}:{os.getpid()}"
        locks = LockClient.from_settings(settings, name, connect=False)
        notices = NotifyClient.from_settings(settings, name, connect=False)
        return cls(locks, notices, queue_table, look)

    def end_look(self) -> None:
        """Nothing: the looks end their own transactions."""

    def register(self, first_id: int) -> tuple[bool, Mapping[str, Any] | None]:
        """Say this waits for the task ``first_id``, then look; (whether a notification
        will come, the look). A server that cannot be reached leaves the wait polling."""
        name = end_lock_name(self._table, first_id)
        try:
            if not self._subscribed:
                for client in (self._locks, self._notices):
                    if not client.connected:
                        client.connect()
                self._notices.subscribe(end_channel(self._table))
                self._subscribed = True
            if not self._locks.try_lock(name):
                return False, self._look()  # another waiter of this task holds it: poll
        except (ServerConnectionError, OSError) as exc:
            logger.debug("wait_for_task: the socket server is not reachable (%s); polling", exc)
            return False, self._look()
        self._name, self._first_id = name, int(first_id)
        return True, self._look()

    def unregister(self) -> None:
        name, self._name, self._first_id = self._name, None, None
        if name is not None:
            try:
                self._locks.unlock(name)
            except (ServerConnectionError, OSError):
                pass  # the server lets a closed connection's locks go

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for a notification; whether it named this task."""
        wanted = str(self._first_id)
        try:
            notices = self._notices.wait(seconds)
        except (ServerConnectionError, OSError):
            time.sleep(seconds)  # a lost server: the looks go on at their pace
            return False
        return any(wanted in payload.split(",") for _channel, payload in notices)

    def look_and_close(self) -> Mapping[str, Any] | None:
        row = self._look()
        self.unregister()
        return row

    def close(self) -> None:
        try:
            self.unregister()
        finally:
            self._locks.close()
            self._notices.close()


class EndAnnouncer(Observer):
    """The worker's side: the ids of the attempts that ended, told to their waiters.

    ``task_finished`` (called as each attempt's end is committed) queues the task's first
    id; ``run`` (a thread) sends, for what is queued, one ``held`` request and one
    notification of the ids that someone waits for."""

    def __init__(self, queue_table: str, locks: LockClient, stop: threading.Event) -> None:
        self._table = queue_table
        self._locks = locks
        self._stop = stop
        self._pending: collections.deque[int] = collections.deque(maxlen=MAX_PENDING)
        self._ready = threading.Event()

    def task_finished(self, task: TaskRecord, outcome: str) -> None:
        self._pending.append(int(task.row.get("id_inicial") or task.id))
        self._ready.set()

    def run(self) -> None:
        while not self._stop.is_set():
            self._ready.wait(0.5)
            self._ready.clear()
            ids = self._take()
            if ids:
                try:
                    self.announce(ids)
                except Exception as exc:  # noqa: BLE001 - waiters poll meanwhile
                    logger.debug("task ends not announced (%s); their waiters poll", exc)
                # The ends of the next few milliseconds go together: at most about 200
                # requests a second to the server however fast the tasks end.
                self._stop.wait(BATCH_SECONDS)

    def _take(self) -> list[int]:
        ids: list[int] = []
        while self._pending:
            ids.append(self._pending.popleft())
        return ids

    def announce(self, ids: list[int]) -> int:
        """Notify the ended tasks ``ids`` that someone waits for; how many were."""
        names = {end_lock_name(self._table, i): i for i in dict.fromkeys(ids)}
        asked = list(names)
        waited: list[int] = []
        for start in range(0, len(asked), NAMES_PER_LOOK):
            waited += [names[n] for n in self._locks.held(asked[start : start + NAMES_PER_LOOK])]
        waited.sort()
        channel = end_channel(self._table)
        for start in range(0, len(waited), IDS_PER_NOTIFICATION):
            chunk = waited[start : start + IDS_PER_NOTIFICATION]
            self._locks.notify(channel, ",".join(str(i) for i in chunk))
        return len(waited)
