"""A dialect's statements for group commit (runtime/group_commit.py).

A commit group: up to QUEUE_BATCH_SIZE tasks claimed and committed at once,
then run one after another in one transaction, each handler after a
savepoint, each success written ('sucesso', liveness lock released) as its
handler returns, and one commit for the group. These are the statements the
runtime needs for that; which store gets which is decided here.
"""

from __future__ import annotations

from typing import Any, Protocol

from nsj_queue_lib.model import Claim, TaskRecord

SAVEPOINT = "nsjq_group"


class GroupLost(Exception):
    """The group's transaction ended under it (a deadlock rolled it back): every success
    written since the group's last commit is gone."""


class GroupOps(Protocol):
    def claim_batch(self, conn: Any, limit: int) -> list[Claim]:
        """Claim up to ``limit`` tasks, their liveness locks taken, committed; a transaction is
        open on return when any was claimed, else ``conn`` is idle."""
        ...

    def complete(self, conn: Any, task: TaskRecord, mensagem: str) -> None:
        """'sucesso' and the lock's release in the open transaction, then a savepoint for
        the next handler. Raises ``GroupLost``."""
        ...

    def complete_and_commit(
        self, conn: Any, task: TaskRecord, mensagem: str, claim_limit: int
    ) -> list[Claim]:
        """The group's last success, the commit, then ``claim_batch(claim_limit)``."""
        ...

    def commit_and_claim(self, conn: Any, claim_limit: int) -> list[Claim]:
        """Commit the group, then ``claim_batch(claim_limit)`` (0: none)."""
        ...

    def savepoint(self, conn: Any) -> None: ...

    def rollback_to_savepoint(self, conn: Any) -> None: ...


def group_ops_for(store: Any) -> GroupOps | None:
    """The store's group statements; None where group commit is not available (SingleStore
    has no savepoints)."""
    from nsj_queue_lib.db.mysql.store import MysqlQueueStore
    from nsj_queue_lib.db.postgres.store import PostgresQueueStore

    if isinstance(store, PostgresQueueStore):
        from nsj_queue_lib.db.postgres.group import PostgresGroupOps

        return PostgresGroupOps(store)
    if isinstance(store, MysqlQueueStore):
        from nsj_queue_lib.db.mysql.group import MysqlGroupOps

        return MysqlGroupOps(store)
    return None
