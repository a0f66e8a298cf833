"""Retry service: rescues attempts whose worker died mid-run.

A 'processando' row with no liveness lock and no row lock has no live worker
(killed, out of memory, lost its connection). It is settled as
'falha_processando' and retried like any failure, or dead-lettered.
"""

from __future__ import annotations

import psycopg

from nsj_queue_lib import model
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.runtime.executor import record_failure
from nsj_queue_lib.runtime.liveness import task_lock_name
from nsj_queue_lib.runtime.service import PeriodicService

logger = get_logger("retry")

BATCH = 100
ORPHAN_MESSAGE = "the worker running this attempt died or lost its database connection"


class RetryService(PeriodicService):
    name = "retry"

    def work(self, conn: psycopg.Connection) -> int:
        queue_oid = self.store.queue_oid(conn)
        conn.commit()
        suspects: set[int] = set()
        if self.lock_client is not None:
            suspects = self._server_suspects(conn, queue_oid)
            if not suspects:
                return 0
        rescued = 0
        while not self.stop.is_set():
            if self.lock_client is None:
                orphans = self.store.find_orphans(conn, queue_oid, BATCH)
                batch_full = len(orphans) == BATCH
            else:
                candidates = self.store.find_orphans(conn, queue_oid, BATCH, check_db_locks=False)
                held = self.lock_client.held(task_lock_name(queue_oid, t["id"]) for t in candidates)
                orphans = [
                    t
                    for t in candidates
                    if t["id"] in suspects and task_lock_name(queue_oid, t["id"]) not in held
                ]
                batch_full = False  # one confirmed batch per run; the next run takes the rest
            for task in orphans:
                record_failure(
                    self.store,
                    conn,
                    self.settings,
                    task,
                    ORPHAN_MESSAGE,
                    status=model.FALHA_PROCESSANDO,
                )
                logger.warning(
                    "queue=%s task=%s tentativa=%s: rescued an abandoned attempt",
                    self.settings.queue_name,
                    task["id"],
                    task["tentativa"],
                )
            conn.commit()
            rescued += len(orphans)
            if not batch_full:
                break
        return rescued

    def _server_suspects(self, conn, queue_oid: int) -> set[int]:
        """Tasks whose server lock is free twice, a grace period apart.

        Right after a socket server restart every lock is free until the
        workers reconnect (with back-off) and take theirs again; a single look
        would rescue tasks that are still running. The grace period covers
        that reconnection.
        """
        candidates = self.store.find_orphans(conn, queue_oid, BATCH, check_db_locks=False)
        conn.commit()  # no row stays locked while waiting
        held = self.lock_client.held(task_lock_name(queue_oid, t["id"]) for t in candidates)
        suspects = {t["id"] for t in candidates if task_lock_name(queue_oid, t["id"]) not in held}
        if suspects and self.stop.wait(self.server_grace_seconds()):
            return set()
        return suspects

    def server_grace_seconds(self) -> float:
        return 2 * self.settings.timeout_socket_message + 1.0
