"""The tally service: keeps the counts of finished attempts that ``nsjq status`` reads
(db/tally.py), so that status costs the backlog and not the history.

Every QUEUE_TALLY_INTERVAL seconds one worker of the cluster (the service lock) folds the
attempts enqueued since its last run, and the open attempts that ended since, into the
tally; a table's first runs go through its history a chunk at a time, one commit each.
Where the queue has no tally tables (SingleStore, or a schema before db_gen --upgrade)
the service does nothing, and status reads the table as before.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.log import get_logger
from nsj_queue_lib.runtime.service import PeriodicService

logger = get_logger("tally")


class TallyService(PeriodicService):
    name = "tally"

    def work(self, conn: Any) -> int:
        """The finished attempts added to the tally."""
        added = 0
        while not self.stop.is_set():
            result = self.store.fold_counts(conn, self.settings.queue_purge_max_age)
            conn.commit()
            if result is None:
                break
            added += result.attempts
            if not result.more:
                break
        if added:
            logger.debug("queue=%s: %d finished attempts tallied", self.settings.queue_name, added)
        return added
