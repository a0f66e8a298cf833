"""Purge service: deletes settled rows older than QUEUE_PURGE_MAX_AGE days.

Rounds of at most QUEUE_PURGE_LIMIT rows, each its own short transaction
that skips locked rows, so no long lock is ever held. Rows still 'pendente',
'agendada' or 'processando' are never deleted, nor a first attempt whose
later attempts still read its payload. The side tables' rows of the tasks
purged go with them (db/side_store.py): in the round's transaction, or before
a day partition is dropped.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.side_store import SidePurge
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.process.removal import remove_due
from nsj_queue_lib.runtime.service import PeriodicService

logger = get_logger("purge")


class PurgeService(PeriodicService):
    name = "purge"

    def work(self, conn: Any) -> int:
        limit = self.settings.queue_purge_limit
        sides = self.side_purge(conn)
        deleted = 0
        while not self.stop.is_set():
            count = self.store.purge_round(
                conn, self.settings.queue_purge_max_age, limit, sides=sides
            )
            conn.commit()
            deleted += count
            if count < limit:
                break
        if deleted:
            logger.info("queue=%s: purged %d row(s)", self.settings.queue_name, deleted)
        if sides is not None and sides.cleared:
            logger.info(
                "queue=%s: cleared the side rows of %d purged task(s)",
                self.settings.queue_name,
                sides.cleared,
            )
        self.remove_processes(conn)
        return deleted

    def side_purge(self, conn: Any) -> SidePurge | None:
        """This run's purge of the side tables (dependencies, workflows, process task
        lists, steps and events) of the tasks it purges, with their rows: looked up by the
        tasks purged, never by a scan of the side tables. Which side tables exist is read
        once a run, so that a db_gen --upgrade is seen without a restart."""
        return SidePurge.for_run(
            self.store, conn, self.settings.queue_purge_limit, self.stop.is_set
        )

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
