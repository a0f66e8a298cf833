"""Purge service: deletes settled rows older than QUEUE_PURGE_MAX_AGE days.

Rounds of at most QUEUE_PURGE_LIMIT rows, each its own short transaction
that skips locked rows, so no long lock is ever held. Rows still 'pendente',
'agendada' or 'processando' are never deleted, nor a first attempt whose
later attempts still read its payload.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.log import get_logger
from nsj_queue_lib.process.removal import remove_due
from nsj_queue_lib.runtime.service import PeriodicService
from nsj_queue_lib.workflow import steps

logger = get_logger("purge")


class PurgeService(PeriodicService):
    name = "purge"

    def work(self, conn: Any) -> int:
        deleted = 0
        while not self.stop.is_set():
            count = self.store.purge_round(
                conn, self.settings.queue_purge_max_age, self.settings.queue_purge_limit
            )
            conn.commit()
            deleted += count
            if count < self.settings.queue_purge_limit:
                break
        if deleted:
            logger.info("queue=%s: purged %d row(s)", self.settings.queue_name, deleted)
        if deleted:
            self.purge_checkpoints(conn)
        self.remove_processes(conn)
        return deleted

    def purge_checkpoints(self, conn: Any) -> None:
        """The durable steps' checkpoints and the events of the tasks purged (their first
        attempts gone), in bounded rounds as the rows themselves. Only after a run that
        deleted rows: finding them reads the whole checkpoint table."""
        limit = self.settings.queue_purge_limit
        while not self.stop.is_set():
            cleared = steps.purge_orphans(self.store, conn, limit)
            if cleared < 0:
                conn.rollback()  # no such tables yet (db_gen --upgrade): nothing to clear
                return
            conn.commit()
            if cleared < limit:
                return

    def remove_processes(self, conn: Any) -> int:
        """The processes due for removal (``remove_after``), in bounded rounds; how many."""
        limit = self.settings.queue_purge_limit
        removed = 0
        while not self.stop.is_set():
            count = remove_due(self.store, conn, limit)
            if count < 0:
                conn.rollback()  # no such tables yet (db_gen --upgrade): nothing to remove
                return removed
            conn.commit()
            removed += count
            if count < limit:
                break
        if removed:
            logger.info("queue=%s: removed %d process(es)", self.settings.queue_name, removed)
        return removed
