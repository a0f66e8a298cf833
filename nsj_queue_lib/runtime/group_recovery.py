"""What a commit group does when something fails: a handler, its commit, its transaction.

- A handler fails: it is rolled back to its savepoint and its failure written
  in the group's transaction, which commits at once (``failed``).
- The commit fails (a deferred constraint, a serialization failure, a lost
  connection): one finished task failed its attempt; several go back to
  'pendente' and run alone from now on, where the culprit fails by itself
  (``settle_failed``).
- The transaction ends under the group (a handler committed or rolled back
  ``bd_conn``, InnoDB rolled it back after a deadlock): the successes written
  since the last commit are looked at; those committed stay 'sucesso', the
  others go back to 'pendente' (``lost``).
- The worker dies: the group's transaction rolls back, its tasks are
  'processando' without a liveness lock, and the retry service rescues each.
Nothing is lost and nothing commits twice; where giving back fails, the
connection holding the tasks' liveness locks is closed so that the retry
service can rescue them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nsj_queue_lib.db.task_session import CANCELADA, RELEASED, FailureRecord
from nsj_queue_lib.exceptions import AttemptFenced, DatabaseError
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import CANCELLED_BEFORE_IT_RAN as CANCELLED_MESSAGE
from nsj_queue_lib.model import CANCELLED_WHILE_RUNNING, TaskRecord
from nsj_queue_lib.runtime.attempt import Attempts
from nsj_queue_lib.runtime.commit_group import CommitGroup
from nsj_queue_lib.runtime.failures import Failures
from nsj_queue_lib.runtime.group_claim import GroupClaims
from nsj_queue_lib.runtime.group_isolation import Isolation

logger = get_logger("group_commit")

# Tries at giving a broken group's tasks back before leaving them to the retry service.
GIVE_BACK_ATTEMPTS = 3

# Why a task that ran in a lost group goes back to the queue (logged).
GROUP_LOST = "its commit group's transaction was rolled back before it committed"


class GroupRecovery:
    def __init__(
        self,
        attempts: Attempts,
        failures: Failures,
        claims: GroupClaims,
        isolation: Isolation,
    ):
        self.attempts = attempts
        self.failures = failures
        self.claims = claims
        self.isolation = isolation
        self.session = attempts.session
        self.connections = attempts.connections
        self.queue_name = attempts.queue_name

    def committed(self, tasks: list[TaskRecord]) -> None:
        """A commit made these tasks 'sucesso'."""
        self.claims.ended_all(tasks)
        self.attempts.succeeded_all(tasks)

    # -- a handler failed --

    def failed(self, conn: Any, group: CommitGroup, task: TaskRecord, error: BaseException) -> Any:
        """Roll the failed handler back and write its failure in the group's transaction;
        the connection to go on with (None: none could be had)."""
        try:
            if group.savepoint and self.session.handler_transaction_open(conn):
                self.session.undo_handler(conn)
            else:
                # (Also where the handler ended the transaction: its own failure says so.)
                if (group.written or group.failures) and not self.lost(conn, group):
                    self.failures.fail(task, conn, error)
                    return self.drop(conn, group)
                self.session.undo_group(conn)
                self.session.drop_held(conn, group)
        except Exception:  # noqa: BLE001 - the connection is gone: settle elsewhere
            self.failures.fail(task, conn, error)  # records on a fresh connection
            return self.drop(conn, group)
        group.savepoint = False
        record = self.failures.account(task, conn, error)
        try:
            self.session.record_failure(conn, task, record)
            group.failures.append((task, record))
        except Exception as exc:  # noqa: BLE001 - recorded again below, on a fresh connection
            # A deadlock here (MySQL: two executors' groups) ends the whole transaction. The
            # failure goes with the group's other tasks to a fresh connection, once this one
            # is closed: its transaction's row locks would block that connection's updates.
            logger.warning(
                "queue=%s task=%s: recording the failure failed (%s); recording it again on a "
                "fresh connection",
                self.queue_name,
                task.id,
                exc,
            )
            group.failures.append((task, record))
            conn = self.connections.discard(conn)
            self.after_broken(group)
        return conn

    # -- the commit failed --

    def settle_failed(self, conn: Any, group: CommitGroup, exc: BaseException) -> Any:
        """Nothing of the group was committed, its next claim neither. One finished task:
        its attempt failed, as with one commit per task. Several: nothing tells whose work
        failed the commit, so none has failed its attempt; they go back to 'pendente' (the
        retry's count untouched) and run alone from now on (group_isolation.py). Returns a
        connection or None."""
        # The unstarted tasks given back in the failed transaction are still claimed.
        group.waiting.extend(reversed(group.released))
        group.released = []
        self.session.drop_held(conn, group)  # held tasks were not: they are free
        if isinstance(exc, AttemptFenced):
            # The others go back to the queue (no suspect among them); the rescued one is
            # left to the attempt its rescuer created.
            logger.warning(
                "queue=%s: a task of a group of %d was rescued by another worker while it ran "
                "(%s); the group's work was rolled back, its other tasks go back to the queue",
                self.queue_name,
                len(group.written),
                exc,
            )
        elif len(group.written) > 1:
            logger.warning(
                "queue=%s: committing a group of %d finished tasks failed (%s); they go back "
                "to the queue and run one commit each until they ran again",
                self.queue_name,
                len(group.written),
                exc,
            )
            self.isolation.suspect(task.id for task, _ in group.written)
        else:
            logger.warning("queue=%s: committing a group failed (%s)", self.queue_name, exc)
            error = exc.__cause__ or exc
            written, group.written = group.written, []
            for task, _ in written:
                if not self.failures.fail(task, conn, error):
                    conn = self.connections.discard(conn)
        # The suspects go back with the unstarted tasks, from a fresh connection. A
        # connection that cannot go on (still in a transaction: aborted, or broken) is closed
        # first: its liveness locks go with it before the tasks are 'pendente' again, where
        # another worker's claim could meet them still held.
        if conn is not None and self.session.handler_transaction_open(conn):
            conn = self.connections.discard(conn, replace=False)
        given_back = self.after_broken(group)
        if given_back and conn is not None:
            return conn
        return self.connections.discard(conn)

    # -- the transaction is gone --

    def lost(self, conn: Any, group: CommitGroup) -> bool:
        """The transaction ended under the group (or must be rolled back): settle what it
        had written, then open a new one for the group's next handlers.

        False when that settling failed on every try: those tasks are still 'processando'
        with their liveness locks held by ``conn``, so the caller must not go on with it
        but end the group with ``drop``."""
        committed = self.session.group_ended(conn, group)
        tasks, failures = group.take_settled()
        # Successes whose handlers' work committed (a handler ended the transaction itself)
        # get the process writes their group's commit was to send (process/batch.py).
        saves = group.processes.saves if group.processes is not None else None
        if not self.give_back(tasks, failures, conn, committed, saves):
            return False
        try:
            self.session.resume_group(conn)
        except DatabaseError:
            pass  # the next statement on conn fails and is handled there
        return True

    def drop(self, conn: Any, group: CommitGroup) -> Any:
        """End a group whose tasks could not be given back on its connection, which is
        alive and holds their liveness locks: closed, it frees them, and the retry service
        rescues those tasks. Pooled again, it would keep them 'processando' for its whole
        life. The group's unstarted tasks go back from a fresh connection, after the close
        (their locks gone with it). Returns a fresh connection, or None."""
        self.session.drop_held(conn, group)
        self.connections.discard(conn, replace=False)
        self.after_broken(group)
        return self.connections.discard(None)

    def after_broken(self, group: CommitGroup) -> bool:
        """The group's transaction is gone with its connection: settle the rest on a fresh
        one. False when that failed."""
        tasks, failures = group.take()
        if tasks or failures:
            return self.give_back(tasks, failures, None, None)
        return True

    def give_back(
        self,
        tasks: list[tuple[TaskRecord, str | None]],
        failures: list[tuple[TaskRecord, FailureRecord]],
        conn: Any,
        committed: bool | None,
        saves: Mapping[int, Any] | None = None,
    ) -> bool:
        """Settle the tasks of a group whose transaction is gone (``committed``: whether it
        committed, None: unknown, the rows say). A success that was committed counts as
        done (written now if it was left for the group's commit); any other task goes back
        to 'pendente' (its work was rolled back: as far as the queue is concerned its
        attempt never ran); a failure whose record was lost is recorded again.

        A deadlock with another executor's claim (MySQL's gap locks) is worth another
        try. False when every try failed: the caller frees the tasks' liveness locks."""
        for attempt in range(1, GIVE_BACK_ATTEMPTS + 1):
            try:
                if conn is None:
                    with self.connections.fresh() as fresh:
                        self.give_back_on(fresh, tasks, failures, committed, saves)
                else:
                    self.give_back_on(conn, tasks, failures, committed, saves)
                return True
            except Exception as exc:  # noqa: BLE001 - tried again, then left to the rescue
                if attempt == GIVE_BACK_ATTEMPTS:
                    logger.warning(
                        "queue=%s: could not give back tasks %s (%s); the retry service will "
                        "rescue them",
                        self.queue_name,
                        [task.id for task, _ in tasks],
                        exc,
                    )
        return False

    def give_back_on(
        self,
        conn: Any,
        tasks: list[tuple[TaskRecord, str | None]],
        failures: list[tuple[TaskRecord, FailureRecord]],
        committed: bool | None,
        saves: Mapping[int, Any] | None = None,
    ) -> None:
        done, given_back = self.session.settle_lost(conn, tasks, failures, committed, saves)
        for task in given_back:
            logger.info(
                "queue=%s task=%s: back to the queue (%s)", self.queue_name, task.id, GROUP_LOST
            )
        self.committed(done)

    def give_back_waiting(self, conn: Any, group: CommitGroup, keep: int = 0) -> None:
        """Unstarted tasks of a group beyond ``keep``: 'pendente' again, in its transaction
        (the last claimed first: the queue's order stays)."""
        while len(group.waiting) > keep:
            claim = group.waiting.pop()
            group.released.append(claim)
            self.release(conn, claim.task, started=False)

    def release(self, conn: Any, task: TaskRecord, started: bool) -> bool:
        """A claimed task whose attempt did not count goes back to 'pendente', its liveness
        lock released; True if it did. One whose cancel was requested meanwhile ends
        'cancelada' instead: cancel_task told its caller it would stop, and given back it
        could start anywhere."""
        mensagem = CANCELLED_WHILE_RUNNING if started else CANCELLED_MESSAGE
        outcome = self.session.give_back_claimed(conn, task, mensagem)
        if outcome == CANCELADA:
            logger.info("queue=%s task=%s: cancelled", self.queue_name, task.id)
        return outcome == RELEASED
