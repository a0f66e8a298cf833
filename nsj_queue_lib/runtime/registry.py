"""The workers table: which workers run on the queue, and which processos each claims.

A worker writes its row at start and every ``HEARTBEAT_SECONDS`` (the processos of its
``@Task`` methods, or NULL when it overrides ``execute`` and claims every processo), and
deletes it when it stops. ``nsjq status`` reads the rows seen within ``STALE_SECONDS`` and
names the ready processos that no live worker claims (docs/handlers.md, "Deployments that
share a queue"). A worker killed leaves its row, which goes stale.

Nothing depends on it for correctness: a table that is missing (a schema before
``db_gen --upgrade``) or a database that is down costs a warning, never the worker.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any

from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.db.queue_store import WorkerStore
from nsj_queue_lib.log import get_logger

logger = get_logger("registry")

HEARTBEAT_SECONDS = 30.0
# A row not seen for three heartbeats belongs to a worker that is gone.
STALE_SECONDS = 3 * HEARTBEAT_SECONDS


def worker_name() -> str:
    """Host (the pod's name in Kubernetes), pid and a random suffix: unique per start."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"[:200]


class WorkerRegistry:
    def __init__(
        self,
        queue_name: str,
        store: WorkerStore,
        connect: Callable[[], Any],
        processos: frozenset[str] | None,
        stop: threading.Event,
        heartbeat: float = HEARTBEAT_SECONDS,
    ):
        self.queue_name = queue_name
        self.store = store
        self._connect = connect
        self.worker = worker_name()
        self.processos = None if processos is None else json.dumps(sorted(processos))
        self._stop = stop
        self.heartbeat = heartbeat
        self._warned = False

    def run(self) -> None:
        """Beat until the worker stops, then remove the row (the thread's target)."""
        while not self._stop.is_set():
            self._write(lambda c: self.store.worker_seen(c, self.worker, self.processos))
            self._stop.wait(self.heartbeat)
        self._write(lambda c: self.store.worker_left(c, self.worker))

    def _write(self, statement: Callable[[Any], None]) -> None:
        """Run ``statement`` on a connection of its own and commit. One statement every
        heartbeat: not worth a connection held between them."""
        conn = None
        try:
            conn = self._connect()
            statement(conn)
            conn.commit()
        except Exception as exc:  # noqa: BLE001 - the registry is advisory: never the worker's end
            if not self._warned:
                self._warned = True
                logger.warning(
                    "queue=%s: cannot write this worker's row in the workers table (%s); "
                    "nsjq status will not list it (db_gen --upgrade creates the table)",
                    self.queue_name,
                    exc,
                )
        finally:
            close_quietly(conn)
