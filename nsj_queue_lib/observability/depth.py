"""The queue's depth, sampled by one worker of the queue at a time.

``DepthSampler`` runs in a thread of every worker with metrics on. It takes
the queue's cluster-wide ``depth`` lock (a session lock in the database, or the
socket server's) and keeps it: the worker holding it samples every
QUEUE_METRICS_DEPTH_INTERVAL seconds on that same connection and publishes the
sample in its ``/metrics``; the others try again at each interval and publish
nothing. So the database sees one depth query per interval for the whole
queue, whatever the number of workers and scrapes; when the sampling worker
stops or loses its connection, the lock is free and another one takes over.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.db.pause_store import PauseStore
from nsj_queue_lib.log import get_logger

if TYPE_CHECKING:
    from nsj_queue_lib.db.queue_store import InspectionStore
    from nsj_queue_lib.runtime.service import ServiceLock

logger = get_logger("depth")

# A sample older than this many intervals is not published (its sampler is stuck).
STALE_INTERVALS = 3


@dataclasses.dataclass(frozen=True)
class DepthSample:
    rows: tuple[dict[str, Any], ...]  # processo, status, tasks, oldest_ready_seconds
    taken_at: float  # time.time() when the query returned
    taken_monotonic: float
    # The pauses in force (fleet/pause.py's Pause), read with the depth.
    pauses: tuple[Any, ...] = ()


class DepthSnapshot:
    """The latest sample this worker took, while it is the sampling worker (thread-safe)."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic):
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._sample: DepthSample | None = None

    def publish(self, rows: list[dict[str, Any]], pauses: tuple[Any, ...] = ()) -> None:
        sample = DepthSample(tuple(rows), time.time(), self._clock(), pauses)
        with self._lock:
            self._sample = sample

    def clear(self) -> None:
        with self._lock:
            self._sample = None

    def current(self) -> DepthSample | None:
        with self._lock:
            sample = self._sample
        if sample is None or self._clock() - sample.taken_monotonic > STALE_INTERVALS * (
            self.interval
        ):
            return None
        return sample


class DepthSampler:
    name = "depth"

    def __init__(
        self,
        store: InspectionStore,
        connect: Callable[[], Any],
        lock: ServiceLock,
        stop: threading.Event,
        snapshot: DepthSnapshot,
    ):
        self.store = store
        self._connect = connect  # a new connection, not autocommit
        self.lock = lock
        self.stop = stop
        self.snapshot = snapshot
        self._conn: Any = None
        self.leading = False
        self.pauses_readable = True

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.sample_once()
                self.stop.wait(self.snapshot.interval)
        finally:
            self._let_go()

    def sample_once(self) -> bool:
        """Sample if this worker holds (or now takes) the lock; whether it sampled."""
        try:
            if self._conn is None:
                self._conn = self._connect()
            if not self.leading:
                self.leading = self.lock.acquire(self._conn)
                if not self.leading:
                    self._let_go()
                    return False
            rows = self.store.depth(self._conn)
            pauses = self._pauses()
            self._conn.commit()
        except Exception as exc:  # noqa: BLE001 - an outage: another worker or a later try samples
            logger.info("queue depth not sampled: %s", exc)
            self._let_go()
            return False
        self.snapshot.publish(rows, pauses)
        return True

    def _pauses(self) -> tuple[Any, ...]:
        """The pauses in force, on the sampling connection; none where the database has
        no pauses (SingleStore)."""
        if not self.pauses_readable:
            return ()
        try:
            return tuple(PauseStore(self._conn, self.store.queue_table).paused(self._conn))
        except (NotImplementedError, TypeError):  # SingleStore; a connection of no driver
            self.pauses_readable = False
            return ()

    def _let_go(self) -> None:
        """Stop being the sampling worker: clear the sample, release the lock, close."""
        self.snapshot.clear()
        if self._conn is not None:
            if self.leading:
                self.lock.release(self._conn)
            close_quietly(self._conn)
        self._conn = None
        self.leading = False
