"""Group commit on MySQL/MariaDB (InnoDB savepoints).

A group's tasks are claimed by one CALL of the claim procedure with
@nsjq_claim_limit set: up to QUEUE_BATCH_SIZE tasks in one transaction and
one commit, before the first handler runs, so that commit never carries a
handler's work. Each success is written
('sucesso', lock released) as its handler returns, in the group's
transaction, which commits once. A deadlock rolls back InnoDB's whole
transaction, not only the statement: the group is then lost (``GroupLost``)
and its written successes go back to the queue (runtime/group_commit.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nsj_queue_lib.db.group_ops import SAVEPOINT, GroupLost, GroupState
from nsj_queue_lib.db.mysql.errors import wrap_driver_errors
from nsj_queue_lib.db.mysql.family_store import LOST
from nsj_queue_lib.db.mysql.store import MysqlQueueStore
from nsj_queue_lib.model import Claim, TaskRecord


class MysqlGroupOps:
    def __init__(self, store: MysqlQueueStore):
        self.store = store

    def claim_batch(self, conn: Any, limit: int) -> list[Claim]:
        if limit > 1:
            return self.store.claim_many(conn, limit)
        claims: list[Claim] = []
        while len(claims) < limit:
            claimed = self.store.claim(conn)  # commits (and chains) its claim
            if claimed is None:
                break
            claims.append(claimed)
        if claims and not self.store.in_transaction(conn):
            self.store.begin(conn)  # the last CALL found nothing and left conn idle
        return claims

    def succeeded(self, conn: Any, task: TaskRecord, mensagem: str) -> None:
        with wrap_driver_errors("complete_task"):
            # Lock wait timeouts are retried there; LOST: a deadlock rolled the group back.
            if self.store._complete(conn, task.id, mensagem) is LOST:
                raise GroupLost(f"task {task.id}: a deadlock rolled back its group's transaction")
        self.store.unlock_task(conn, task.id)

    def savepoint(self, conn: Any, group: GroupState) -> None:
        self._execute(conn, "savepoint", f"SAVEPOINT {SAVEPOINT}")

    def rollback_to_savepoint(self, conn: Any) -> None:
        self._execute(conn, "rollback to savepoint", f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")

    def commit(
        self,
        conn: Any,
        written: Sequence[tuple[TaskRecord, str]],
        claim_limit: int,
        chain: bool = False,
    ) -> list[Claim]:
        self.store.commit(conn)
        return self.claim_batch(conn, claim_limit) if claim_limit else []

    def transaction_committed(self, conn: Any, group: GroupState) -> bool | None:
        return None  # each success was written as it came: the rows say

    def _execute(self, conn: Any, what: str, sql: str) -> None:
        with wrap_driver_errors(what), conn.cursor() as cur:
            cur.execute(sql)


GROUP_OPS_CLASS = MysqlGroupOps
