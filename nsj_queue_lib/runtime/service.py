"""Periodic maintenance services: a schedule, a cluster-wide lock, ``run_once()``.

Each run opens its own short-lived connection and takes the service's
session-level advisory lock; a worker that does not get it skips the run,
so one worker in the cluster does the work. Errors are logged and the loop
goes on; the stop event ends it between runs or between rounds.
"""

from __future__ import annotations

import abc
import datetime
import hashlib
import threading
from collections.abc import Callable

import psycopg

from nsj_queue_lib.db.queue_store import QueueStore
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.runtime.liveness import service_lock_name
from nsj_queue_lib.settings import Settings

logger = get_logger("service")


def service_lock_key(queue_table: str, service: str) -> int:
    """A signed 64-bit advisory lock key for (queue, service).

    One-bigint advisory locks never collide with the two-int4 task liveness
    locks, and hashing the queue's name keeps queues apart.
    """
    digest = hashlib.blake2b(
        f"nsj_queue_lib:{queue_table}:{service}".encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


class PeriodicService(abc.ABC):
    name: str = "service"

    def __init__(
        self,
        settings: Settings,
        store: QueueStore,
        connect: Callable[[bool], psycopg.Connection],
        stop: threading.Event,
        schedule,
        lock_client=None,
    ):
        self.settings = settings
        self.store = store
        self._connect = connect
        self.stop = stop
        self.schedule = schedule
        self.lock_client = lock_client  # CLIENT_SERVER_MODE: locks come from the socket server
        self.lock_key = service_lock_key(settings.queue_table, self.name)

    def run(self) -> None:
        logger.info(
            "queue=%s: %s service scheduled %r", self.settings.queue_name, self.name, self.schedule
        )
        while not self.stop.is_set():
            now = datetime.datetime.now()
            wait = (self.schedule.next_after(now) - now).total_seconds()
            if self.stop.wait(max(0.0, wait)):
                break
            try:
                self.run_once()
            except Exception as exc:  # noqa: BLE001 - a failed run must not end the service
                logger.warning(
                    "queue=%s: %s run failed: %s", self.settings.queue_name, self.name, exc
                )

    def run_once(self) -> int | None:
        """One run under the cluster-wide lock; None when another worker holds it."""
        if self.lock_client is not None:
            return self._run_once_with_server_lock()
        with self._connect(False) as conn:
            if not self.store.try_service_lock(conn, self.lock_key):
                conn.rollback()
                self._skipped()
                return None
            conn.commit()
            try:
                return self.work(conn)
            finally:
                try:
                    conn.rollback()
                    self.store.service_unlock(conn, self.lock_key)
                    conn.commit()
                except Exception:  # noqa: BLE001 - a dead connection released the lock already
                    pass

    def _run_once_with_server_lock(self) -> int | None:
        from nsj_queue_lib.client.channel import ServerConnectionError

        with self._connect(False) as conn:
            lock_name = service_lock_name(self.store.queue_oid(conn), self.name)
            conn.commit()
            try:
                locked = self.lock_client.try_lock(lock_name)
            except ServerConnectionError:
                if not self.lock_client.reconnect(stop=self.stop, max_wait=5):
                    raise
                locked = self.lock_client.try_lock(lock_name)
            if not locked:
                self._skipped()
                return None
            try:
                return self.work(conn)
            finally:
                try:
                    self.lock_client.unlock(lock_name)
                except Exception:  # noqa: BLE001 - a lost connection released it anyway
                    pass

    def _skipped(self) -> None:
        logger.debug(
            "queue=%s: %s run skipped, another worker runs it", self.settings.queue_name, self.name
        )

    @abc.abstractmethod
    def work(self, conn: psycopg.Connection) -> int:
        """The service's work, in transactions of its own on ``conn``; returns rows affected."""
