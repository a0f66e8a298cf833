"""The default drain on PostgreSQL: many tasks per commit, each still atomic with its writes.

With group commit (QUEUE_BATCH_SIZE > 1; docs/group-commit.md) a slot drains
in *groups*:

1. up to QUEUE_BATCH_SIZE ready tasks are claimed in one statement (their
   liveness locks taken) and committed - with the previous group's commit
   when there was one;
2. their handlers run one after another in one transaction (``attempt.py``).
   Before every handler but the transaction's first a savepoint is set; a
   handler that fails is rolled back to it and its failure written in the
   transaction, which commits at once (``group_recovery.py``). A success is
   written as its handler returns (MySQL) or with the group's commit
   (PostgreSQL: one statement for all); a retried attempt runs in a group of
   its own;
3. the group commits after its last task, in one round trip with the next
   group's claim. A group that has been open QUEUE_BATCH_MAX_MS commits its
   finished tasks after its running one and goes on with the rest in a new
   transaction; and a group claims only as many tasks as the recent handlers
   run in QUEUE_BATCH_MAX_MS (at least one, ``group_pace.py``), so slow
   handlers commit one by one and never hold tasks another worker could start.

An idle queue loses nothing here: a task that arrives alone is claimed alone
and committed as soon as its handler returns. A handler given up after its
timeout: its session is ended from another connection, which rolls the group
back; the group's other tasks go back to 'pendente' from there (``given_up``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from nsj_queue_lib.db.task_session import GroupLost
from nsj_queue_lib.exceptions import DatabaseError, TaskSuspended
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import Claim
from nsj_queue_lib.process.batch import ProcessBatch
from nsj_queue_lib.runtime.attempt import Attempts
from nsj_queue_lib.runtime.commit_group import CommitGroup
from nsj_queue_lib.runtime.failures import Failures
from nsj_queue_lib.runtime.group_claim import GroupClaims
from nsj_queue_lib.runtime.group_isolation import Isolation
from nsj_queue_lib.runtime.group_pace import Pace
from nsj_queue_lib.runtime.group_recovery import GroupRecovery
from nsj_queue_lib.runtime.group_steps import DrainSteps
from nsj_queue_lib.runtime.handler_commits import GroupCommits
from nsj_queue_lib.runtime.running import RunningTask
from nsj_queue_lib.runtime.tokens import WakeTokens

logger = get_logger("group_commit")


class GroupDrain:
    def __init__(
        self,
        attempts: Attempts,
        failures: Failures,
        claims: GroupClaims,
        tokens: WakeTokens,
        stop: threading.Event,
        *,
        size: int,
        max_ms: float,
    ):
        self.attempts = attempts
        self.session = attempts.session
        self.claims = claims
        self.tokens = tokens
        self.stop = stop
        self.size = size
        self.max_seconds = max_ms / 1000.0
        self.connections = attempts.connections
        self.running = attempts.running
        self.pace = Pace()  # recent handlers' durations
        self.isolation = Isolation()  # after a group's commit failed: claims of one
        self.steps = DrainSteps(self.max_seconds)
        self.recovery = GroupRecovery(attempts, failures, claims, self.isolation)
        self._lock = threading.Lock()
        self._groups: dict[int, CommitGroup] = {}  # by slot thread id
        # Per slot thread: how many tasks its last claim asked for, and the claim count
        # after its last commit when it stepped back (else None).
        self._asked = threading.local()

    def claim_next(self) -> bool:
        return not self.stop.is_set()

    # -- the slot's loop --

    def drain(self) -> bool:
        """Claim and run groups until a claim comes back empty or the worker stops; whether
        the slot drains again at once: after a step-back it waits idle for
        QUEUE_BATCH_MAX_MS (a wake-up takes it back), then claims itself unless a claim
        that started since its commit saw what it freed: never is a freed task left with
        every slot idle."""
        stepped_back = self.drain_groups()
        if stepped_back is None:
            return False
        woken = self.tokens.take(timeout=self.max_seconds)
        if woken is not None:
            return woken
        return not self.stop.is_set() and not self.steps.claimed_since(stepped_back)

    def drain_groups(self) -> int | None:
        """The drain itself: None, or when it stepped back the claim count after its last
        commit."""
        conn = self.connections.get()
        if conn is None:
            return None
        self._asked.stepped_back = None
        self.steps.count_active(True)
        with self.running.draining():
            try:
                claims = self._claim_next_group(conn)
                self.steps.woken(found=bool(claims))
                while claims and conn is not None:
                    if len(claims) >= self._asked.limit and self.steps.may_wake():
                        # There may be more: let an idle slot look.
                        self.steps.woke(self.tokens.wake_one_idle())
                    conn, claims = self._run_group(conn, claims)
            except DatabaseError as exc:
                logger.warning("queue=%s: %s", self.attempts.queue_name, exc)  # "claim failed"
                conn = self.connections.discard(conn, replace=False)
            except BaseException:
                # Unexpected (a bug): conn may hold a group's liveness locks, which outlive a
                # rollback. Pooled again, it would keep its tasks 'processando' for the
                # connection's life; closed, they are the retry service's to rescue.
                conn = self.connections.discard(conn, replace=False)
                raise
            finally:
                self.connections.put_back(conn)
                self.steps.count_active(False)
        stepped_back: int | None = self._asked.stepped_back
        return stepped_back

    def _claim_next_group(self, conn: Any, limit: int | None = None) -> list[Claim]:
        """The next group's claim, remembering how many tasks it asked for: a claim that got
        fewer found no more it could take (lock keys busy, a short backlog), and waking an
        idle slot to look again costs a claim that walks the whole backlog for nothing."""
        if limit is None:
            limit = self._claim_limit()
        self.steps.claim_started()
        claims = self.claims.claim(conn, limit)
        # The limited claim takes one task whatever the limit: a claim of one then says
        # nothing about what else is ready.
        self._asked.limit = 1 if self.claims.last_was_limited() else limit
        return claims

    def _claim_limit(self) -> int:
        """Up to QUEUE_BATCH_SIZE tasks, fewer when handlers are slow: as many as take
        QUEUE_BATCH_MAX_MS at the recent handlers' pace (at least one)."""
        if not self.claim_next():
            return 0
        if self.isolation.active():
            return 1
        pace = self.pace.seconds
        if pace <= 0:
            return self.size
        return max(1, min(self.size, int(self.max_seconds / pace)))

    # -- one group --

    def _run_group(self, conn: Any, claims: list[Claim]) -> tuple[Any, list[Claim]]:
        """Run one group; (the connection to go on with or None, the next group's claims)."""
        self.isolation.claimed(claims)
        group = CommitGroup(claims, self._asked.limit)
        if self.session.process_batches:
            group.processes = ProcessBatch(lambda: [claim.task.row for claim in group.waiting])
        me = threading.get_ident()
        with self._lock:
            self._groups[me] = group
        try:
            while True:
                conn = self._run_tasks(conn, group)
                if conn is None:
                    return None, []
                if not group.waiting or not self.claim_next():
                    return self._settle(conn, group)
                # Open for QUEUE_BATCH_MAX_MS, or a retry next: what finished commits, the
                # rest goes on.
                conn = self._settle_finished(conn, group)
                if conn is None:
                    return None, []
        finally:
            with self._lock:
                self._groups.pop(me, None)
            self.running.changed()  # wait_idle waits for the group's commit too

    def open(self) -> bool:
        """Whether a group is running or committing (a stopping worker waits for it); one
        whose handler was given up after its timeout is settled already."""
        with self._lock:
            return any(not group.abandoned for group in self._groups.values())

    def _run_tasks(self, conn: Any, group: CommitGroup) -> Any:
        """Run the group's tasks until it closes; the connection to commit on, or None."""
        while group.waiting:
            if group.waiting[0].task.tentativa > 1 and (group.written or group.failures):
                return conn  # a retry runs in a group of its own: the others commit first
            if not group.savepoint and self.session.holds_rows(conn):
                # Held tasks (QUEUE_ONE_WRITE) are this transaction's: a failure must not
                # roll it back whole, even the first handler's.
                conn = self._before_next_handler(conn, group)
            item = self.attempts.start(conn, group.waiting.popleft())
            task = item.task
            item.context.commits = GroupCommits(self.session, self.recovery, conn, group, task)
            item.context.process_batch = group.processes
            outcome = self.attempts.run_handler(item)
            took = time.monotonic() - item.started
            if group.processes is not None:
                took -= group.processes.take_load_seconds()
            self.pace.took(task, took)
            if outcome is None:  # given up after its timeout (timeouts.py)
                self.connections.discard(conn, replace=False)  # the transaction rolls back
                # The handler may have returned before the timeout's thread called
                # given_up(): the group leaves _groups when this returns, where given_up()
                # would no longer find it. Its other tasks go back now (once: either call).
                self.given_up(item)
                return None
            last = not group.waiting or task.tentativa > 1 or self._closing(group)
            if isinstance(outcome, TaskSuspended):
                # A durable wait committed the group so far with the task 'pendente' again:
                # the next handler is its transaction's first (no savepoint to set).
                self.attempts.suspended(task, outcome)
                self.session.after_settled(task, conn)
                if last:
                    break
                continue
            if isinstance(outcome, str):
                try:
                    self.session.succeeded(conn, task, outcome)
                except GroupLost:
                    # A deadlock, not the handler's failure: the task runs again.
                    group.written.append((task, outcome))
                    if not self.recovery.lost(conn, group):
                        return self.recovery.drop(conn, group)
                    if last:
                        break
                    continue
                except DatabaseError as exc:
                    outcome = exc.__cause__ or exc  # nothing of this attempt was kept
                else:
                    group.written.append((task, outcome))
                    if last:
                        break
                    conn = self._before_next_handler(conn, group)
                    continue
            # A failure commits at once (with the successes before it): its record, its
            # retry or dead letter show without waiting for the rest of the group.
            return self.recovery.failed(conn, group, task, outcome)
        return conn

    def _closing(self, group: CommitGroup) -> bool:
        """Whether the group commits after its running task: stopping, open
        QUEUE_BATCH_MAX_MS, or about to be by the end of its next handler (group_pace.py)."""
        if not self.claim_next():
            return True
        open_for = time.monotonic() - group.started
        if group.waiting:
            open_for += self.pace.expected(group.waiting[0].task)
        return open_for >= self.max_seconds

    def _before_next_handler(self, conn: Any, group: CommitGroup) -> Any:
        """Set the next handler's savepoint; the connection to go on with."""
        try:
            self.session.before_next_handler(conn, group)
            group.savepoint = True
        except GroupLost:  # what the group wrote is gone or unknown (MySQL's first savepoint)
            if not self.recovery.lost(conn, group):
                return self.recovery.drop(conn, group)
        except DatabaseError:
            group.savepoint = False  # the next failure rolls the whole transaction back
        return conn

    # -- its commit --

    def _settle(self, conn: Any, group: CommitGroup) -> tuple[Any, list[Claim]]:
        """Unstarted tasks back (the group closed early), commit, claim the next group."""
        finished = [task for task, _ in group.written]
        try:
            self.session.resume_group(conn)  # a replacement connection (the group's broke)
            self.recovery.give_back_waiting(conn, group)
            limit = self._claim_limit()
            self.claims.ended_all(finished)  # before the look below, as a single commit does
            # A limited task may start: it is claimed after the commit (group_claim.py).
            limited = bool(limit) and self.claims.limited_due()
            stepping_back = bool(limit) and not limited and self.steps.steps_back(group.short)
            if stepping_back:
                limit = 0
            self._asked.limit = limit  # when limited, _claim_next_group below says
            claims = self._settle_and_claim(conn, group, 0 if limited else limit, stepping_back)
        except (DatabaseError, GroupLost) as exc:
            conn = self.recovery.settle_failed(conn, group, exc)
            # Go on draining (what went back to the queue is ready now, and no wake-up
            # announces it), one task at a time if the group's tasks are suspects.
            return conn, [] if conn is None else self._claim_next_group(conn)
        self.recovery.committed(finished)
        if stepping_back:
            self._asked.stepped_back = self.steps.mark()
            return conn, []
        return conn, self._claim_next_group(conn, limit) if limited else claims

    def _settle_and_claim(
        self, conn: Any, group: CommitGroup, limit: int, stepping_back: bool
    ) -> list[Claim]:
        """The group's commit, with the next group's claim of up to ``limit`` tasks."""
        if limit:
            self.steps.claim_started()
        started = time.perf_counter()
        try:
            claims = self.session.settle_group(conn, group, limit)
        except BaseException:
            if stepping_back:
                self.steps.count_active(True)  # it goes on draining after all
            raise
        self.claims.committed(started, claims)
        return claims

    def _settle_finished(self, conn: Any, group: CommitGroup) -> Any:
        """Commit the group's finished tasks; its claimed ones go on in a new transaction."""
        try:
            # Slow handlers: keep what the recent pace runs in QUEUE_BATCH_MAX_MS.
            self.recovery.give_back_waiting(conn, group, keep=self._claim_limit())
            self.session.settle_group(conn, group, 0, go_on=True)
        except (DatabaseError, GroupLost) as exc:
            # The group is emptied: _run_group commits nothing and claims again.
            return self.recovery.settle_failed(conn, group, exc)
        self.recovery.committed(group.committed())
        self.tokens.wake_one_idle()  # tasks given back: an idle slot may take them
        return conn

    # -- a task given up after its timeout --

    def given_up(self, item: RunningTask) -> None:
        """Its session was ended: the group's other tasks go back from a fresh connection."""
        with self._lock:
            group = self._groups.get(item.thread_id or 0)
            if group is None or group.abandoned:
                return
            group.abandoned = True
            tasks, failures = group.take()
        if tasks or failures:
            self.recovery.give_back(tasks, failures, None, False)
            # They are ready again, and nothing announces them: the replacement slot was
            # woken when the task was abandoned, before they went back, and may be idle.
            self.tokens.wake(1)
