"""Periodic maintenance services: a schedule, a cluster-wide lock, ``run_once()``.

Each run opens its own short-lived connection and takes the service's
cluster-wide lock (a session lock in the database, on a second connection
whose transaction stays open for the run, or the socket server's);
a worker that does not get it skips the run, so one worker in the cluster
does the work. Errors are logged and the loop goes on; the stop event ends
it between runs or between rounds. A run that failed on an error the database
calls transient (``transient``, from the driver: a deadlock, a lock wait
timeout, a Galera certification failure) is run again at once, up to
``TRANSIENT_RETRIES`` times a few tens of ms apart, instead of waiting for the
next scheduled run (every 5 minutes by default).
"""

from __future__ import annotations

import abc
import datetime
import hashlib
import random
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.db.queue_store import QueueStore, SessionLockStore
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.runtime.liveness import service_lock_name
from nsj_queue_lib.runtime.schedule import Schedule
from nsj_queue_lib.settings import Settings

if TYPE_CHECKING:
    from nsj_queue_lib.client.lock_client import LockClient

logger = get_logger("service")

# A run failed on a transient database error is tried again this many times at once.
TRANSIENT_RETRIES = 3
TRANSIENT_DELAY_SECONDS = 0.05  # doubled per retry, with jitter

# The one-bigint advisory locks of nsj-queue-lib 1.2.2's retry, purge and notify threads.
LEGACY_MAINTENANCE_KEYS = (1, 2, 3)


def service_lock_key(queue_table: str, service: str) -> int:
    """A signed 64-bit key for (queue, service).

    On PostgreSQL one-bigint advisory locks never collide with the two-int4
    task liveness locks, and hashing the queue's name keeps queues apart.
    """
    digest = hashlib.blake2b(
        f"nsj_queue_lib:{queue_table}:{service}".encode(), digest_size=8
    ).digest()
    key = int.from_bytes(digest, "big", signed=True)
    # 1, 2 and 3 are nsj-queue-lib 1.2.2's maintenance locks (and its first tasks' keys).
    return key + len(LEGACY_MAINTENANCE_KEYS) if key in LEGACY_MAINTENANCE_KEYS else key


class ServiceLock(Protocol):
    """The cluster-wide lock one service run holds."""

    def acquire(self, conn: Any) -> bool:
        """Take the lock; False when another worker holds it. ``conn`` ends idle."""
        ...

    def release(self, conn: Any) -> None: ...


class DatabaseServiceLock:
    """A session lock, held on a connection of its own inside a transaction left open
    from ``acquire`` to ``release``.

    Invariant (connection poolers): the lock is taken, kept and released inside one
    open transaction. A pooler in transaction mode hands a server connection to
    another client only between transactions, so the lock can never stay behind on
    a server connection that no longer serves this run; if the connection is lost
    the transaction ends and the lock goes with it. The transaction does no writes
    and keeps no snapshot between statements: it holds back neither vacuum nor
    anyone else. The run's own work commits on the connection ``acquire`` is given.
    """

    def __init__(self, store: SessionLockStore, key: int, connect: Callable[[], Any]):
        self.store = store
        self.key = key
        self._connect = connect  # a new connection, not autocommit: the lock opens a transaction
        self._holder: Any = None

    def acquire(self, conn: Any) -> bool:
        holder = self._connect()
        try:
            taken = self.store.try_service_lock(holder, self.key)
        except BaseException:
            close_quietly(holder)
            raise
        if not taken:
            close_quietly(holder)
            return False
        self._holder = holder
        return True

    def release(self, conn: Any) -> None:
        holder, self._holder = self._holder, None
        if holder is None:
            return
        try:
            self.store.service_unlock(holder, self.key)  # still inside the lock's transaction
            holder.commit()
        except Exception:  # noqa: BLE001 - a dead connection released the lock already
            pass
        finally:
            close_quietly(holder)


class ServerServiceLock:
    """A lock of the socket server (CLIENT_SERVER_MODE), named after the queue's number."""

    def __init__(
        self, store: QueueStore, lock_client: LockClient, service: str, stop: threading.Event
    ):
        self.store = store
        self.locks = lock_client
        self.service = service
        self.stop = stop

    def _name(self) -> str:
        return service_lock_name(self.store.queue_number, self.service)

    def acquire(self, conn: Any) -> bool:
        from nsj_queue_lib.client.channel import ServerConnectionError

        conn.commit()
        try:
            return self.locks.try_lock(self._name())
        except ServerConnectionError:
            if not self.locks.reconnect(stop=self.stop, max_wait=5):
                raise
            return self.locks.try_lock(self._name())

    def release(self, conn: Any) -> None:
        try:
            self.locks.unlock(self._name())
        except Exception:  # noqa: BLE001 - a lost connection released it anyway
            pass


class PeriodicService(abc.ABC):
    name: str = "service"
    # Its connection is autocommit (statements that cannot run in a transaction: VACUUM).
    autocommit: bool = False

    def __init__(
        self,
        settings: Settings,
        store: QueueStore,
        connect: Callable[[], Any],
        lock: ServiceLock,
        stop: threading.Event,
        schedule: Schedule,
    ):
        self.settings = settings
        self.store = store
        self._connect = connect  # a new connection, not autocommit
        self.lock = lock
        self.stop = stop
        self.schedule = schedule
        # Whether a failed run's error is transient (set by the runtime from its driver).
        self.transient: Callable[[BaseException], bool] = lambda exc: False

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
                self.run_retrying()
            except Exception as exc:  # noqa: BLE001 - a failed run must not end the service
                logger.warning(
                    "queue=%s: %s run failed: %s", self.settings.queue_name, self.name, exc
                )

    def run_retrying(self) -> int | None:
        """``run_once``, run again at once (``TRANSIENT_RETRIES`` times) when it failed on a
        transient database error; the last error leaves."""
        for retry in range(TRANSIENT_RETRIES + 1):
            try:
                return self.run_once()
            except Exception as exc:
                if retry == TRANSIENT_RETRIES or not self.transient(exc):
                    raise
                logger.info(
                    "queue=%s: %s run failed on a transient error (%s); running it again",
                    self.settings.queue_name,
                    self.name,
                    exc,
                )
                delay = TRANSIENT_DELAY_SECONDS * (2**retry) * (0.5 + random.random())
                if self.stop.wait(delay):
                    return None
        return None  # pragma: no cover - the loop returns or raises

    def run_once(self) -> int | None:
        """One run under the cluster-wide lock; None when another worker holds it."""
        with self._connect() as conn:
            if not self.lock.acquire(conn):
                logger.debug(
                    "queue=%s: %s run skipped, another worker runs it",
                    self.settings.queue_name,
                    self.name,
                )
                return None
            try:
                return self.work(conn)
            finally:
                self.lock.release(conn)

    @abc.abstractmethod
    def work(self, conn: Any) -> int:
        """The service's work, in transactions of its own on ``conn``; returns rows affected."""
