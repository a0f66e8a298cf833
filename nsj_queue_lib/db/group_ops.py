"""A dialect's statements for group commit (runtime/group_commit.py).

A commit group: up to QUEUE_BATCH_SIZE tasks claimed and committed at once,
then run one after another in one transaction, each handler after a
savepoint, each success written ('sucesso', liveness lock released) as its
handler returns, and one commit for the group. These are the statements the
runtime needs for that; which store gets which is decided here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from nsj_queue_lib.db.driver import driver_class
from nsj_queue_lib.model import Claim, TaskRecord

SAVEPOINT = "nsjq_group"


class GroupLost(Exception):
    """The group's transaction ended under it (a deadlock rolled it back): every success
    written since the group's last commit is gone."""


class GroupState(Protocol):
    """What a dialect may remember about the open group (``tx``: its own token), and its
    successes since its last commit (``written``)."""

    tx: Any
    written: list[tuple[TaskRecord, str]]


class GroupOps(Protocol):
    def claim_batch(self, conn: Any, limit: int) -> list[Claim]:
        """Claim up to ``limit`` tasks, their liveness locks taken, committed; a transaction is
        open on return when any was claimed, else ``conn`` is idle."""
        ...

    def succeeded(self, conn: Any, task: TaskRecord, mensagem: str) -> None:
        """A handler returned: write its success now, or leave it to ``commit`` (which gets
        every success of the group). Raises ``GroupLost``."""
        ...

    def savepoint(self, conn: Any, group: GroupState) -> None:
        """The savepoint the next handler rolls back to when it fails (PostgreSQL sets it
        only before the handler's first statement: db/postgres/first_use.py). Raises
        ``GroupLost`` when what the group wrote since its last commit is gone, or cannot
        be told apart."""
        ...

    def rollback_to_savepoint(self, conn: Any) -> None:
        """Undo what the handler since ``savepoint`` sent (nothing to do if it sent nothing)."""
        ...

    def commit(
        self,
        conn: Any,
        written: Sequence[tuple[TaskRecord, str]],
        claim_limit: int,
        chain: bool = False,
        group: GroupState | None = None,
    ) -> list[Claim]:
        """Write what ``succeeded`` left of ``written`` ('sucesso', locks released), commit,
        then claim up to ``claim_limit`` tasks as ``claim_batch`` does. ``chain``: the
        group goes on, a new transaction opens with the commit where the dialect can
        (the session is never idle while it holds the group's liveness locks). ``group``:
        the open group, whose ``tx`` says what the dialect wrote already.

        The fence: raises ``AttemptFenced`` (nothing committed, the handlers' writes rolled
        back) when a task of ``written`` is no longer 'processando': another worker rescued
        it and runs it again."""
        ...

    def transaction_committed(self, conn: Any, group: GroupState) -> bool | None:
        """After the transaction ended under the group: whether it committed; None when the
        dialect cannot tell (the tasks' rows then say)."""
        ...


def group_ops_for(db_driver: str, store: Any) -> GroupOps | None:
    """The dialect's group statements for ``store`` (``Driver.group_ops``); None where group
    commit is not available (SingleStore has no savepoints)."""
    ops: GroupOps | None = driver_class(db_driver).group_ops(store)
    return ops
