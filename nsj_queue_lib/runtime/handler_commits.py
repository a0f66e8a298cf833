"""Commits in the middle of a handler: a durable step's checkpoint, a durable wait's end.

A handler runs inside the transaction that will also write its task's 'sucesso'
(``attempt.py``). A durable step (``workflow/steps.py``) commits that transaction
when the step returns, with the step's writes and its checkpoint, and the handler
goes on in a new one; a durable wait (``workflow/waits.py``) commits it with the
task written 'pendente' again and its liveness lock freed. The drain that runs
the handler says how (``context.commits``):

- one commit per task (``SingleCommits``): COMMIT AND CHAIN, which keeps the
  session busy in a transaction (PostgreSQL's retry service reads a liveness
  lock held by an idle session as left behind). The liveness lock is a session
  lock: it outlives the commit, and the task stays 'processando', owned by
  this attempt (the step's fence checked it, its row locked until the commit).
- a commit group (``GroupCommits``): the group's transaction holds the finished
  tasks of the group before this one, whose successes are written at the
  group's end. Committing the handler's work without them would keep their
  writes without their 'sucesso' (a crash then runs them again), so a step
  commits the group so far, exactly as a group open for QUEUE_BATCH_MAX_MS
  does (``GroupDrain._settle_finished``): the finished tasks' successes, the
  failures written, this handler's work, one commit; the group's unstarted
  tasks stay claimed, and the running handler goes on as the first of the
  group's next transaction (no savepoint needed: a failure after the step
  rolls back only what followed it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nsj_queue_lib.db.step_store import StepStore
from nsj_queue_lib.db.task_session import GroupLost, TaskSession
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.workflow.steps import checkpoints_of

if TYPE_CHECKING:
    from nsj_queue_lib.runtime.commit_group import CommitGroup
    from nsj_queue_lib.runtime.group_recovery import GroupRecovery


class _Commits:
    __slots__ = ("session", "conn", "task")  # one per task: kept cheap

    def __init__(self, session: TaskSession, conn: Any, task: TaskRecord):
        self.session = session
        self.conn = conn
        self.task = task

    @property
    def steps(self) -> StepStore:
        """Where the task's checkpoints are (workflow/steps.py)."""
        return checkpoints_of(self.session.store, self.session.store.queue_table)


class SingleCommits(_Commits):
    """A handler's commits when its task commits alone."""

    __slots__ = ()

    def prepare(self) -> None:
        """Before the fence of a commit in the middle of the handler: nothing to do."""

    def keep(self) -> None:
        """What the transaction holds, committed; the next one open, the task still claimed."""
        self.session.keep_handler_work(self.conn)

    def release(self) -> None:
        """The liveness lock freed and the transaction committed (the caller wrote the task
        'pendente' in it); ``conn`` is idle after it."""
        self.session.release_handler(self.conn, self.task)


class GroupCommits(_Commits):
    """A handler's commits inside a commit group (see the module's docstring)."""

    __slots__ = ("recovery", "group")

    def __init__(
        self,
        session: TaskSession,
        recovery: GroupRecovery,
        conn: Any,
        group: CommitGroup,
        task: TaskRecord,
    ):
        super().__init__(session, conn, task)
        self.recovery = recovery
        self.group = group

    def prepare(self) -> None:
        """The group's held tasks written 'processando' (QUEUE_ONE_WRITE): the running one
        (its fence reads it so), and the rest, which go on after the commit."""
        self.session.write_held(self.conn)

    def keep(self) -> None:
        try:
            self.session.settle_group(self.conn, self.group, 0, go_on=True)
        except GroupLost as exc:
            # The group's transaction ended under it: the handler fails (its work is gone
            # with the group's), and the drain's recovery looks at what committed.
            raise DatabaseError(f"a durable step's commit failed: {exc}") from exc
        self.recovery.committed(self.group.committed())

    def release(self) -> None:
        self.session.unlock_in_transaction(self.conn, self.task)
        self.keep()


HandlerCommits = SingleCommits | GroupCommits
