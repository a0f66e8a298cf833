"""The queue's operations on SingleStore, for one queue table.

The MySQL family's operations, with what SingleStore lacks done another way:
- no SKIP LOCKED: ``claim_uncommitted`` reads candidates without locking and
  wins one with a conditional update (``... WHERE id = %s AND status =
  'pendente'``) in the claim's transaction: the row count tells who won; a
  worker racing for the same row waits for that transaction and then finds
  it claimed;
- no named locks (GET_LOCK): liveness and maintenance locks come from the
  socket server, so this store has no database-lock operations and its
  driver requires CLIENT_SERVER_MODE=true;
- no RETURNING and no consecutive AUTO_INCREMENT values: one INSERT per task;
- no deadlock detection: conflicts end as lock wait timeouts (1205), which
  are retried like on MySQL;
- no COMMIT AND CHAIN: ``commit_and_begin`` is two statements.

Times are DATETIME(6) in the cluster's time zone (one per cluster).
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.mysql.errors import retry_on_lock_errors, wrap_driver_errors
from nsj_queue_lib.db.mysql.family_store import MysqlFamilyStore
from nsj_queue_lib.db.mysql.names import SINGLESTORE, ServerInfo
from nsj_queue_lib.db.mysql.rows import claimed_row, rows_as_dicts
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.model import TaskRecord

# Candidates read per claim, in case other workers win the first ones.
CLAIM_CANDIDATES = 5


class SingleStoreQueueStore(MysqlFamilyStore):
    dialect = "singlestore"

    def server(self, conn: Any) -> ServerInfo:
        return ServerInfo(SINGLESTORE, 1)

    def claim_uncommitted(self, conn: Any) -> TaskRecord | None:
        """Claim by a conditional update and leave the claim's transaction open.

        The caller takes the task's lock on the socket server, then commits
        with ``commit_and_begin``, or rolls back to return it to the queue.
        """
        steps = self.sql["claim_tasks"]

        def attempt() -> TaskRecord | None:
            conn.begin()
            with conn.cursor() as cur:
                cur.execute(steps["candidates"], {"limit": CLAIM_CANDIDATES})
                for row in rows_as_dicts(cur):
                    mark = {"id": row["id"], "worker": self.worker_name}
                    if cur.execute(steps["mark"], mark) == 1:
                        return TaskRecord.from_row(claimed_row(row, self._first_payloads(cur, row)))
                    # else another worker won it first
            conn.rollback()
            return None

        with wrap_driver_errors("claim"):
            return retry_on_lock_errors("claim", attempt, conn.rollback)

    # -- no table maintenance (the driver's capabilities start no vacuum service) --

    def table_health(self, conn: Any) -> None:
        # SingleStore removes old row versions itself and keeps its statistics with its
        # autostats (on by default); its ANALYZE would only make the plans that read the
        # table compile again.
        return None

    def vacuum(self, conn: Any) -> None:
        raise NotImplementedError("SingleStore removes old row versions itself")

    def analyze(self, conn: Any) -> None:
        raise NotImplementedError("SingleStore keeps its statistics itself (autostats)")

    def hot_space(self, conn: Any) -> None:
        return None  # no vacuum service here (Capabilities.table_maintenance)

    def compact_hot(self, conn: Any, lock_timeout_ms: int) -> bool:
        raise NotImplementedError("SingleStore removes old row versions itself")

    def commit_and_begin(self, conn: Any) -> None:
        with wrap_driver_errors("commit"):
            conn.commit()
            conn.begin()

    def find_orphans(self, conn: Any, limit: int, check_session_locks: bool) -> list[TaskRecord]:
        """'processando' rows, oldest first; the caller asks the socket server which are held.

        Nothing is row-locked (SingleStore has no SKIP LOCKED): settling them
        relies on the conditional updates of fail_and_retry / fail_and_bury /
        fail_final.
        """
        if check_session_locks:
            raise ConfigError(
                {"CLIENT_SERVER_MODE": "SingleStore has no session locks to check for orphans"}
            )
        steps = self.sql["find_orphans"]
        with wrap_driver_errors("find_orphans"), conn.cursor() as cur:
            cur.execute(steps["select"], {"limit": limit})
            ids = [row[0] for row in cur.fetchall()]
            if not ids:
                return []
            cur.execute(steps["rows"], {"ids": ids})
            return [TaskRecord.from_row(row) for row in rows_as_dicts(cur)]
