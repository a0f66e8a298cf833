"""The queue table's statistics on MySQL and MariaDB, as the vacuum service reads and refreshes them.

InnoDB removes old row versions itself (its purge thread): there is nothing to
vacuum. Its persistent statistics are another matter: InnoDB recalculates them
by itself only once a tenth of the table's rows changed
(``innodb_stats_auto_recalc``). A queue table keeps weeks of history, so a
burst of a hundred thousand enqueued tasks on a table of ten million rows
leaves the optimizer's row count and index cardinalities as they were. The
vacuum service therefore runs ``ANALYZE TABLE`` (a sample of each index's
pages, cheap) once more rows than ``QUEUE_VACUUM_DEAD_ROWS`` changed since the
statistics were last calculated.

"Rows changed since then" is InnoDB's own counter, ``MODIFIED_COUNTER``,
which every calculation resets: ANALYZE's and InnoDB's automatic one alike.
Reading it needs the PROCESS privilege, which a worker's user often lacks.
Such a worker compares the table's estimated row count with what it was after
this process's last ANALYZE (before one: at its first look). That sees a
burst of enqueued or purged tasks, not updates in place. Every worker process
keeps its own baseline, so after a burst each may analyze once: harmless, an
ANALYZE reads a few pages per index.

MySQL before 8.0.24 ends every ANALYZE TABLE by flushing the table from the table
definition cache: it waits for every statement that has the table open, and each
statement that opens it meanwhile waits behind it ("Waiting for table flush"), so one
long report query stalls the whole queue. On those servers the service leaves the
statistics to InnoDB's own recalculation (``analyze_stalls_queries``). MariaDB took
Percona's fix (MDEV-15101: InnoDB's ANALYZE keeps the table in the cache) in 10.5; the
library supports MariaDB 10.6 and later, and runs its ANALYZE with
``use_stat_tables = 'NEVER'`` (queries.sql), so neither the flush nor a full-table
engine-independent collection happens there.
"""

from __future__ import annotations

import re
from typing import Any

from nsj_queue_lib.db.mysql.errors import error_code, logger, wrap_driver_errors
from nsj_queue_lib.db.mysql.names import MYSQL
from nsj_queue_lib.db.queue_store import TableHealth
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.identifiers import split_table_name

# "Access denied; you need (at least one of) the PROCESS privilege(s)".
ER_SPECIFIC_ACCESS_DENIED = 1227
# The first MySQL whose ANALYZE TABLE no longer flushes the table (its 8.0.24 release notes).
MYSQL_ANALYZE_WITHOUT_FLUSH = (8, 0, 24)
MARIADB_ANALYZE_WITHOUT_FLUSH = (10, 5, 0)  # MDEV-15101
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def analyze_stalls_queries(version: str) -> bool:
    """Whether ANALYZE TABLE on the server of ``version`` (``SELECT VERSION()``) flushes the
    table from the table cache, stalling the queue's statements behind a long query. An
    unreadable version counts as affected: skipping ANALYZE costs only staler statistics."""
    # MariaDB's handshake may start with "5.5.5-" (for clients of long ago) before its own.
    found = _VERSION.search(version.removeprefix("5.5.5-"))
    if found is None:
        return True
    number = tuple(int(part) for part in found.groups())
    if "mariadb" in version.lower():
        return number < MARIADB_ANALYZE_WITHOUT_FLUSH
    return number < MYSQL_ANALYZE_WITHOUT_FLUSH


class InnodbStatistics:
    """The statistics of one queue table. Used by the vacuum service's thread alone (its
    baseline is this process's)."""

    def __init__(
        self, sql: dict[str, dict[str, str]], queue_table: str, partition: str | None = None
    ):
        self.health_steps = sql["table_health"]
        self.analyze_steps = sql["analyze"]
        self.queue_table = queue_table
        schema, table = split_table_name(queue_table)
        self.params = {"schema": schema, "table": table}
        # A partitioned table (db/mysql/layout.py): its hot partition's statistics alone,
        # the one that changes; InnoDB names it <table>#P#<partition> (MySQL: #p#).
        self.partition = partition
        self.counter_readable = True  # until the server says the user lacks PROCESS
        self.analyze_safe: bool | None = None  # whether ANALYZE leaves the table cache alone
        self.rows_at_analyze: int | None = None  # the baseline without the counter

    def health(self, conn: Any, flavour: str) -> TableHealth:
        """Rows changed since the last calculation; ANALYZE TABLE needs SELECT and INSERT on
        the table, which every worker's user has (it reads tasks and inserts retries). On a
        server whose ANALYZE would stall the queue, nothing ever needs refreshing."""
        with wrap_driver_errors("table health"), conn.cursor() as cur:
            if not self._analyze_safe(cur):
                return TableHealth(0, 0, may_maintain=True)
            if self.counter_readable:
                changed = self._modified_counter(cur, flavour)
                if changed is not None:
                    return TableHealth(0, changed, may_maintain=True)
            rows = self._rows(cur, flavour)
        if self.rows_at_analyze is None:
            self.rows_at_analyze = rows
        return TableHealth(0, abs(rows - self.rows_at_analyze), may_maintain=True)

    def analyze(self, conn: Any, flavour: str) -> None:
        with wrap_driver_errors("analyze"), conn.cursor() as cur:
            cur.execute(
                self.analyze_steps[flavour if self.partition is None else f"{flavour}_partition"]
            )
            # ANALYZE TABLE reports a failure as a row of its result, not as an error.
            failed = [str(row[3]) for row in cur.fetchall() if str(row[2]).lower() == "error"]
            if failed:
                raise DatabaseError(f"ANALYZE TABLE {self.queue_table} failed: {'; '.join(failed)}")
            if not self.counter_readable:
                self.rows_at_analyze = self._rows(cur, flavour)

    def _analyze_safe(self, cur: Any) -> bool:
        """Whether this server's ANALYZE TABLE keeps the table in the cache (read once)."""
        if self.analyze_safe is None:
            cur.execute("SELECT VERSION()")
            row = cur.fetchone()
            version = row[0] if row else ""
            if isinstance(version, bytes):
                version = version.decode("ascii", "replace")
            self.analyze_safe = not analyze_stalls_queries(str(version))
            if not self.analyze_safe:
                logger.warning(
                    "%s: this server (%s) flushes the table from its cache on ANALYZE TABLE, "
                    "stalling the queue's statements behind any long query; the vacuum "
                    "service leaves the statistics to InnoDB (MySQL 8.0.24 and later do not "
                    "flush)",
                    self.queue_table,
                    version,
                )
        return self.analyze_safe

    def _modified_counter(self, cur: Any, flavour: str) -> int | None:
        """InnoDB's counter; None when this user may not read it."""
        try:
            params = self.params
            if self.partition is not None:
                marker = "#p#" if flavour == MYSQL else "#P#"
                params = dict(params, table=f"{params['table']}{marker}{self.partition}")
            cur.execute(self.health_steps[f"modified_{flavour}"], params)
        except Exception as exc:
            if error_code(exc) != ER_SPECIFIC_ACCESS_DENIED:
                raise
            self.counter_readable = False
            logger.info(
                "%s: this database user lacks the PROCESS privilege, so the statistics' "
                "count of changed rows is unreadable; the vacuum service follows the "
                "table's estimated row count instead",
                self.queue_table,
            )
            return None
        row = cur.fetchone()
        # Not listed: InnoDB's dictionary cache does not hold the table (unused since the
        # server started, or for long), so nothing changed it lately.
        return 0 if row is None else int(row[0])

    def _rows(self, cur: Any, flavour: str) -> int:
        if flavour == MYSQL:
            cur.execute(self.health_steps["live_rows_mysql"])
        if self.partition is None:
            cur.execute(self.health_steps["rows"], self.params)
        else:
            cur.execute(
                self.health_steps["partition_rows"], dict(self.params, partition=self.partition)
            )
        row = cur.fetchone()
        return 0 if row is None or row[0] is None else int(row[0])
