"""Purge service: deletes settled rows older than QUEUE_PURGE_MAX_AGE days.

Rounds of at most QUEUE_PURGE_LIMIT rows, each its own short transaction
that skips locked rows, so no long lock is ever held. Rows still 'pendente',
'agendada' or 'processando' are never deleted, nor a first attempt whose
later attempts still read its payload.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.log import get_logger
from nsj_queue_lib.runtime.service import PeriodicService

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
        return deleted
