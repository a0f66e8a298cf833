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

Under the partitioned layout (PostgreSQL) the table vacuumed is the hot partition,
which holds only unfinished work. A snapshot held open somewhere (a long report, a
stuck session) keeps every row version since it began, so the partition grows while
it is held; afterwards VACUUM frees the space but returns only the file's trailing
pages, and new rows keep landing all over it. So at each cycle, once the dead versions
are gone (a vacuum removed them) and the partition is still several times larger than
its rows (and past a few MB), the service rewrites it (VACUUM FULL): a few milliseconds
for a partition the size of its backlog, under an exclusive lock it waits at most
COMPACT_LOCK_TIMEOUT_MS for (claims and enqueues wait that long at worst), tried again
at the next cycle when not granted.

Only the table's owner (or a superuser) may vacuum it on PostgreSQL: a worker
whose database user is neither says so once, then keeps looking. Databases
that keep their statistics fresh themselves (SingleStore) get no vacuum
service (``Capabilities.table_maintenance``).
"""

from __future__ import annotations

import time
from typing import Any

from nsj_queue_lib.db.queue_store import HotSpace, TableHealth
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.runtime.service import PeriodicService

logger = get_logger("vacuum")

# The hot partition is rewritten past this size when it is this many times the size of
# its rows (docs/internals/storage.md).
COMPACT_MIN_BYTES = 8 * 1024 * 1024
COMPACT_FACTOR = 8
COMPACT_LOCK_TIMEOUT_MS = 200


def worth_compacting(space: HotSpace, dead_rows_threshold: int) -> bool:
    """A rewrite pays when the partition is mostly free space; it would not while a snapshot
    still holds the dead versions the vacuum had to leave (they would be copied too)."""
    return (
        space.size_bytes >= COMPACT_MIN_BYTES
        and space.size_bytes > COMPACT_FACTOR * space.live_bytes
        and space.dead_rows < dead_rows_threshold
    )


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
            # Nothing to vacuum, but a rewrite refused its lock last cycle may be due.
            if health.may_maintain:
                self._compact(conn, threshold)
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
        self._compact(conn, threshold)
        return health.dead_rows if vacuum else 0

    def _compact(self, conn: Any, dead_rows_threshold: int) -> None:
        space = self.store.hot_space(conn)
        if space is None or not worth_compacting(space, dead_rows_threshold):
            return
        started = time.monotonic()
        if not self.store.compact_hot(conn, COMPACT_LOCK_TIMEOUT_MS):
            logger.info(
                "queue=%s: the hot partition (%.1f MB, rows %.1f MB) was not rewritten: "
                "its lock was not granted within %d ms; the next cycle tries again",
                self.settings.queue_name,
                space.size_bytes / 1e6,
                space.live_bytes / 1e6,
                COMPACT_LOCK_TIMEOUT_MS,
            )
            return
        after = self.store.hot_space(conn)
        logger.info(
            "queue=%s: rewrote the hot partition from %.1f MB to %.1f MB in %.3f s",
            self.settings.queue_name,
            space.size_bytes / 1e6,
            (after.size_bytes if after else 0) / 1e6,
            time.monotonic() - started,
        )

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
