"""Group commit on PostgreSQL: the claim function's call for every step.

The claim function already settles one task and claims up to ``claim_limit``
tasks in one statement; a group only changes the statement sent after it in
the same round trip: a savepoint for the next handler instead of a commit,
and ``COMMIT AND CHAIN`` once per group. So a task still costs one round
trip, and the group one commit.
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.group_ops import SAVEPOINT
from nsj_queue_lib.db.postgres.store import PostgresQueueStore, wrap_driver_errors
from nsj_queue_lib.model import Claim, TaskRecord

_SAVEPOINT = f"SAVEPOINT {SAVEPOINT}".encode()
_ROLLBACK_TO = f"ROLLBACK TO SAVEPOINT {SAVEPOINT}"


class PostgresGroupOps:
    def __init__(self, store: PostgresQueueStore):
        self.store = store

    def claim_batch(self, conn: Any, limit: int) -> list[Claim]:
        rows = self.store.claim_call(conn, None, None, limit, b"COMMIT AND CHAIN", begin=True)
        return self._claims(conn, rows)

    def complete(self, conn: Any, task: TaskRecord, mensagem: str) -> None:
        self.store.claim_call(conn, task.id, mensagem, 0, _SAVEPOINT)

    def complete_and_commit(
        self, conn: Any, task: TaskRecord, mensagem: str, claim_limit: int
    ) -> list[Claim]:
        commit = b"COMMIT AND CHAIN" if claim_limit else b"COMMIT"
        rows = self.store.claim_call(conn, task.id, mensagem, claim_limit, commit)
        return self._claims(conn, rows) if claim_limit else []

    def commit_and_claim(self, conn: Any, claim_limit: int) -> list[Claim]:
        if not claim_limit:
            self.store.commit(conn)
            return []
        rows = self.store.claim_call(conn, None, None, claim_limit, b"COMMIT AND CHAIN")
        return self._claims(conn, rows)

    def savepoint(self, conn: Any) -> None:
        with wrap_driver_errors("savepoint"):
            conn.execute(_SAVEPOINT.decode())

    def rollback_to_savepoint(self, conn: Any) -> None:
        with wrap_driver_errors("rollback to savepoint"):
            conn.execute(_ROLLBACK_TO)

    def _claims(self, conn: Any, rows: list[dict[str, Any]]) -> list[Claim]:
        if not rows:
            self.store.rollback(conn)  # the empty transaction opened for the next group
            return []
        claims = []
        for row in rows:
            locked = bool(row.pop("liveness_locked"))
            claims.append(Claim(TaskRecord.from_row(row), locked))
        return claims
