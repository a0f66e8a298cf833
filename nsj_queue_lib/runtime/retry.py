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
        rescued = 0
        while not self.stop.is_set():
            if self.lock_client is None:
                orphans = self.store.find_orphans(conn, queue_oid, BATCH)
            else:
                candidates = self.store.find_orphans(conn, queue_oid, BATCH, check_db_locks=False)
                held = self.lock_client.held(task_lock_name(self.settings.queue_table, t["id"]) for t in candidates)
                orphans = [t for t in candidates
                           if task_lock_name(self.settings.queue_table, t["id"]) not in held]
                if len(candidates) == BATCH and not orphans:
                    break  # a full batch of live tasks: look again next run
            for task in orphans:
                record_failure(self.store, conn, self.settings, task, ORPHAN_MESSAGE,
                               status=model.FALHA_PROCESSANDO)
                logger.warning("queue=%s task=%s tentativa=%s: rescued an abandoned attempt",
                               self.settings.queue_name, task["id"], task["tentativa"])
            conn.commit()
            rescued += len(orphans)
            if len(orphans) < BATCH:
                break
        return rescued
