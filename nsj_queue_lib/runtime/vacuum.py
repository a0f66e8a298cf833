"""The vacuum service: the queue table's dead row versions never pile up, and its statistics
stay fresh.

Every claim and every settle leaves a dead row version behind on PostgreSQL,
and the claim index keeps an entry for each until a VACUUM. Autovacuum's
default threshold grows with the table (a fifth of its rows), so a queue table
that keeps weeks of history collects millions of dead versions before it is
vacuumed, and claims walk past them (docs/internals/storage.md); where
autovacuum is off, nothing ever removes them. So every QUEUE_VACUUM_INTERVAL
seconds one worker of the cluster (the service lock) reads the table's
statistics and, past QUEUE_VACUUM_DEAD_ROWS dead versions, runs
``VACUUM (ANALYZE)`` on it; a vacuum already at work on the table
(autovacuum's) is left to finish. Past as many rows changed since the
statistics were last calculated (a burst of enqueued tasks leaves no dead
version), it runs ``ANALYZE``: the planner's picture of the table stays fresh.
That part holds on MySQL/MariaDB too, whose InnoDB removes old row versions
itself (no dead rows to count) but recalculates its statistics by itself only
once a tenth of the table changed (db/mysql/statistics.py).

Only the table's owner (or a superuser) may vacuum it on PostgreSQL: a worker
whose database user is neither says so once, then keeps looking. Databases
that keep their statistics fresh themselves (SingleStore) get no vacuum
service (``Capabilities.table_maintenance``).
"""

from __future__ import annotations

import time
from typing import Any

from nsj_queue_lib.db.queue_store import TableHealth
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.runtime.service import PeriodicService

logger = get_logger("vacuum")


class VacuumService(PeriodicService):
    name = "vacuum"
    autocommit = True  # VACUUM cannot run inside a transaction
    refused = False  # the worker's user may not vacuum the table (said once)

    def work(self, conn: Any) -> int:
        """The dead row versions the vacuum removed (as the statistics counted them); 0 when
        it did nothing, or only refreshed the statistics."""
        health = self.store.table_health(conn)
        threshold = self.settings.queue_vacuum_dead_rows
        if health is None or not threshold:
            return 0
        vacuum = health.dead_rows >= threshold
        if not vacuum and health.changed_since_analyze < threshold:
            return 0
        if not health.may_maintain:
            self._refuse(health)
            return 0
        started = time.monotonic()
        if vacuum:
            self.store.vacuum(conn)
        else:
            # Inserts alone leave no dead version but age the statistics: a burst of
            # enqueued tasks the planner does not know of.
            self.store.analyze(conn)
        logger.info(
            "queue=%s: %s %s (%d dead row versions, %d rows changed since its last "
            "ANALYZE) in %.1f s",
            self.settings.queue_name,
            "vacuumed" if vacuum else "analyzed",
            self.settings.queue_table,
            health.dead_rows,
            health.changed_since_analyze,
            time.monotonic() - started,
        )
        return health.dead_rows if vacuum else 0

    def _refuse(self, health: TableHealth) -> None:
        if self.refused:
            return
        self.refused = True
        logger.warning(
            "queue=%s: %d dead row versions in %s, but this worker's database user "
            "does not own the table and cannot VACUUM or ANALYZE it; autovacuum, or its "
            "owner, must (docs/how-to/create-a-queue.md)",
            self.settings.queue_name,
            health.dead_rows,
            self.settings.queue_table,
        )
