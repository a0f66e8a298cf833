"""Group commit: many tasks per commit, each still atomic with its handler's writes.

With QUEUE_BATCH_SIZE > 1 an executor thread drains in *groups*
(docs/group-commit.md):

1. up to QUEUE_BATCH_SIZE ready tasks are claimed in one statement (their
   liveness locks taken) and committed - with the previous group's commit
   when there was one;
2. their handlers run one after another in one transaction. Before every
   handler but the transaction's first a savepoint is set; a handler that
   fails is rolled back to it and its failure written in the transaction,
   which commits at once (the other tasks' writes stay; the rest of the group
   goes on in a new transaction). A success is written as its handler returns
   (MySQL) or with the group's commit (PostgreSQL: one statement for all); a
   retried attempt runs in a group of its own;
3. the group commits after its last task, in one round trip with the next
   group's claim. A group that has been open QUEUE_BATCH_MAX_MS commits its
   finished tasks after its running one and goes on with the rest in a new
   transaction; and a group claims only as many tasks as the recent handlers
   run in QUEUE_BATCH_MAX_MS (at least one), so slow handlers commit one by
   one and never hold tasks another worker could start.

An idle queue loses nothing here: a task that arrives alone is claimed alone
and committed as soon as its handler returns.

What can go wrong, and where it ends:
- the worker dies: the group's transaction rolls back, every task of the
  group is 'processando' (committed by the claim) without a liveness lock,
  and the retry service rescues each: nothing lost, nothing committed twice;
- the transaction ends under the group (a handler committed or rolled back
  ``bd_conn``, or InnoDB rolled it back after a deadlock): the tasks whose
  success was written since the last commit are looked at; those committed
  stay 'sucesso', the others go back to 'pendente' (their writes are gone);
- a handler given up after its timeout: its session is ended from another
  connection, which rolls the group back; the group's other tasks go back to
  'pendente' from there (``given_up``).

The async executor and the socket server's liveness locks (and
QUEUE_COMPAT_1_2_2) keep one commit per task.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.db.driver import driver_module_name
from nsj_queue_lib.db.group_ops import GroupLost, GroupOps, group_ops_for
from nsj_queue_lib.exceptions import AttemptFenced, DatabaseError
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import Claim, TaskRecord
from nsj_queue_lib.queue_client import CANCELLED_MESSAGE
from nsj_queue_lib.retry_policy import Decision
from nsj_queue_lib.runtime.executor import (
    CANCELLED_WHILE_RUNNING,
    RunningTask,
    TaskExecutor,
    settle_failure,
)
from nsj_queue_lib.runtime.group_claim import GroupClaims, liveness_chain
from nsj_queue_lib.runtime.group_isolation import Isolation
from nsj_queue_lib.runtime.group_pace import Pace
from nsj_queue_lib.runtime.liveness import DatabaseLiveness

logger = get_logger("group_commit")

# Tries at giving a broken group's tasks back before leaving them to the retry service.
GIVE_BACK_ATTEMPTS = 3

# A full claim wakes no idle executor for QUEUE_BATCH_MAX_MS x 2**n after n wake-ups in a
# row found nothing to claim, n up to this (GroupDrain._woken).
WAKE_BACKOFF_STEPS = 3

# Why a task that ran in a lost group goes back to the queue (logged).
GROUP_LOST = "its commit group's transaction was rolled back before it committed"


@dataclasses.dataclass(frozen=True)
class _Settle:
    """How a failed attempt is recorded (``TaskExecutor._account_failure``)."""

    status: str
    recorded: BaseException | str
    decision: Decision | None


class _Group:
    """The tasks of one commit group, as its thread goes through them."""

    def __init__(self, claims: list[Claim], asked: int = 0):
        self.started = time.monotonic()
        # Its claim got fewer tasks than it asked for: no more were free (lock keys held by
        # other executors, a short backlog). Such a group's commit may step back (GroupDrain).
        self.short = len(claims) < asked
        self.waiting: collections.deque[Claim] = collections.deque(claims)
        # Unstarted tasks given back in the open transaction: claimed again if it fails.
        self.released: list[Claim] = []
        # Successes since the group's last commit, with their mensagem.
        self.written: list[tuple[TaskRecord, str]] = []
        # Failures written there: (task, how to settle it again if the transaction is lost).
        self.failures: list[tuple[TaskRecord, _Settle]] = []
        self.savepoint = False  # a savepoint is set for the next handler
        self.abandoned = False  # its running task was given up (timeouts.py)
        self.tx: Any = None  # the dialect's token for the open transaction (GroupOps)

    def take(self) -> tuple[list[tuple[TaskRecord, str | None]], list[tuple[TaskRecord, _Settle]]]:
        """Everything not committed: (tasks with their mensagem, None if unstarted;
        failures), the group emptied."""
        tasks: list[tuple[TaskRecord, str | None]] = list(self.written)
        tasks += [(claim.task, None) for claim in self.waiting]
        failures = self.failures
        self.written, self.failures, self.waiting = [], [], collections.deque()
        self.savepoint, self.tx = False, None
        return tasks, failures


class GroupDrain:
    """An executor's drain loop in commit groups (``TaskExecutor.group``)."""

    def __init__(self, executor: TaskExecutor, ops: GroupOps):
        self.ex = executor
        self.ops = ops
        self.size = executor.settings.batch_size
        self.max_seconds = executor.settings.queue_batch_max_ms / 1000.0
        self._lock = threading.Lock()
        self._groups: dict[int, _Group] = {}  # by executor thread id
        self.pace = Pace()  # recent handlers' durations
        self.isolation = Isolation()  # after a group's commit failed: claims of one
        self.claims = GroupClaims(ops, executor.liveness)  # per-processo limits first
        # Per executor thread: how many tasks its last claim asked for (_claim_next_group),
        # and whether its drain stepped back (_steps_back).
        self._asked = threading.local()
        # Executor threads draining that have not stepped back, and claims started so far
        # (a stepped-back thread knows from it whether a claim saw what its commit freed).
        self._active = 0
        self._claims_started = 0
        # Wake-ups that found nothing: a full claim wakes no idle executor until
        # _wake_backoff_until (WAKE_BACKOFF_STEPS doublings of QUEUE_BATCH_MAX_MS at most).
        self._wasted_wakes = 0
        self._wake_backoff_until = 0.0
        self._claim_wakes = 0  # threads woken by a full claim, their drain not started

    # -- the thread's loop (TaskExecutor._thread_main) --

    def drain(self) -> int | None:
        """Claim and run groups until a claim comes back empty or the worker stops. Returns
        None, or when the drain stepped back (``_steps_back``) the claim count after its
        last commit (``claimed_since``)."""
        ex = self.ex
        conn = ex._connection()
        if conn is None:
            return None
        self._asked.stepped_back = None
        self._count_active(True)
        with ex.draining():
            try:
                claims = self._claim_next_group(conn)
                self._woken(found=bool(claims))
                while claims and conn is not None:
                    if len(claims) >= self._asked.limit and self._may_wake():
                        # There may be more: let an idle thread look.
                        self._woke(ex._wake_one_idle())
                    conn, claims = self._run_group(conn, claims)
            except DatabaseError as exc:
                logger.warning("queue=%s: %s", ex.settings.queue_name, exc)  # "claim failed: ..."
                conn = ex._discard(conn, replace=False)
            except BaseException:
                # Unexpected (a bug): conn may hold a group's liveness locks, which outlive a
                # rollback. Pooled again, it would keep its tasks 'processando' for the
                # connection's life; closed, they are the retry service's to rescue.
                conn = ex._discard(conn, replace=False)
                raise
            finally:
                ex._put_back(conn)
                self._count_active(False)
        return self._asked.stepped_back

    def _count_active(self, active: bool) -> None:
        """This thread in or out of ``_active`` (once either way)."""
        with self._lock:
            if active != getattr(self._asked, "active", False):
                self._active += 1 if active else -1
                self._asked.active = active

    def _woken(self, found: bool) -> None:
        """A drain's first claim found tasks or not. Where lock keys are scarce, the
        executors draining hold them all and their claims still come back full: each would
        wake an idle executor whose claim walks the backlog for nothing. Such wasted
        wake-ups hold the next ones back, longer each time in a row."""
        with self._lock:
            if self._claim_wakes == 0:
                return  # woken by the dispatcher, or after a step-back: not by a full claim
            self._claim_wakes -= 1
            if found:
                self._wasted_wakes = 0
                self._wake_backoff_until = 0.0
                return
            self._wasted_wakes = min(WAKE_BACKOFF_STEPS, self._wasted_wakes + 1)
            backoff = self.max_seconds * (1 << self._wasted_wakes)
            self._wake_backoff_until = time.monotonic() + backoff

    def _woke(self, woken: bool) -> None:
        if woken:
            with self._lock:
                self._claim_wakes += 1

    def _may_wake(self) -> bool:
        with self._lock:
            return time.monotonic() >= self._wake_backoff_until

    def claimed_since(self, mark: int) -> bool:
        """Whether a claim started after ``mark`` (a count of claims started)."""
        with self._lock:
            return self._claims_started > mark

    def _claim_started(self) -> None:
        with self._lock:
            self._claims_started += 1

    def _steps_back(self, group: _Group) -> bool:
        """Whether this thread commits its group without claiming the next and goes idle.

        With lock keys scarce (issue 19), each draining executor holds its group's keys
        until the group commits: with 100 keys and 8 executors, groups of ~12 tasks, one
        commit and one claim (walking the backlog) per 12 tasks, whatever
        QUEUE_BATCH_SIZE is. An executor whose claim got fewer tasks than it asked for
        leaves the work to the others, whose groups grow with the keys it frees; a full
        claim wakes an idle executor again when there is more work than they hold. Under
        the lock, so that two executors never both step back counting on each other: the
        last one draining never does."""
        if not group.short:
            return False
        with self._lock:
            if self._active <= 1:
                return False
            self._active -= 1
            self._asked.active = False
        return True

    def _claim_next_group(self, conn: Any, limit: int | None = None) -> list[Claim]:
        """The next group's claim, remembering how many tasks it asked for: a claim that got
        fewer found no more it could take (lock keys busy, a short backlog), and waking an
        idle executor to look again costs a claim that walks the whole backlog for nothing
        (issue 19: with 100 lock keys and 8x20 slots, one such walk per group)."""
        if limit is None:
            limit = self._claim_limit()
        self._claim_started()
        claims = self.claims.claim(conn, limit)
        # The limited claim takes one task whatever the limit: a claim of one then says
        # nothing about what else is ready.
        self._asked.limit = 1 if self.claims.last_was_limited() else limit
        return claims

    def _claim_limit(self) -> int:
        """Up to QUEUE_BATCH_SIZE tasks, fewer when handlers are slow: as many as take
        QUEUE_BATCH_MAX_MS at the recent handlers' pace (at least one), so that a group
        never holds tasks other workers could start sooner."""
        if not self.ex._claim_next():
            return 0
        if self.isolation.active():
            return 1
        pace = self.pace.seconds
        if pace <= 0:
            return self.size
        return max(1, min(self.size, int(self.max_seconds / pace)))

    def _run_group(self, conn: Any, claims: list[Claim]) -> tuple[Any, list[Claim]]:
        """Run one group; (the connection to go on with or None, the next group's claims)."""
        self.isolation.claimed(claims)
        group = _Group(claims, self._asked.limit)
        me = threading.get_ident()
        with self._lock:
            self._groups[me] = group
        try:
            while True:
                conn = self._run_tasks(conn, group)
                if conn is None:
                    return None, []
                if not group.waiting or not self.ex._claim_next():
                    return self._commit(conn, group)
                # Open for QUEUE_BATCH_MAX_MS, or a retry next: what finished commits, the
                # rest goes on.
                conn = self._commit_finished(conn, group)
                if conn is None:
                    return None, []
        finally:
            with self._lock:
                self._groups.pop(me, None)
            with self.ex._finished:  # wait_idle waits for the group's commit too
                self.ex._finished.notify_all()

    def open(self) -> bool:
        """Whether a group is running or committing (a stopping worker waits for it); one
        whose handler was given up after its timeout is settled already."""
        with self._lock:
            return any(not group.abandoned for group in self._groups.values())

    def _run_tasks(self, conn: Any, group: _Group) -> Any:
        """Run the group's tasks until it closes; the connection to commit on, or None."""
        ex = self.ex
        while group.waiting:
            if group.waiting[0].task.tentativa > 1 and (group.written or group.failures):
                return conn  # a retry runs in a group of its own: the others commit first
            item = ex._started(conn, group.waiting.popleft())
            task = item.task
            try:
                outcome = ex._call_handler(item)
                if outcome is not None:
                    ex.after_handler(item.context)
            finally:
                ex._ended(task)
            self.pace.took(task, time.monotonic() - item.started)
            if outcome is None:  # given up after its timeout (timeouts.py)
                ex._discard(conn, replace=False)  # the group's transaction rolls back
                # The handler may have returned before the timeout's thread called
                # given_up(): the group leaves _groups when this returns, where given_up()
                # would no longer find it. Its other tasks go back now (once: either call).
                self.given_up(item)
                return None
            last = not group.waiting or task.tentativa > 1 or self._closing(group)
            if isinstance(outcome, str):
                try:
                    self.ops.succeeded(conn, task, outcome)
                except GroupLost:
                    # A deadlock, not the handler's failure: the task runs again.
                    group.written.append((task, outcome))
                    if not self._lost(conn, group):
                        return self._drop(conn, group)
                    if last:
                        break
                    continue
                except DatabaseError as exc:
                    outcome = exc.__cause__ or exc  # nothing of this attempt was kept
                else:
                    group.written.append((task, outcome))
                    if last:
                        break
                    conn = self._savepoint(conn, group)
                    continue
            # A failure commits at once (with the successes before it): its record, its
            # retry or dead letter show without waiting for the rest of the group.
            return self._failed(conn, group, task, outcome)
        return conn

    def _closing(self, group: _Group) -> bool:
        """Whether the group commits after its running task: stopping, open
        QUEUE_BATCH_MAX_MS, or about to be by the end of its next handler (group_pace.py)."""
        if not self.ex._claim_next():
            return True
        open_for = time.monotonic() - group.started
        if group.waiting:
            open_for += self.pace.expected(group.waiting[0].task)
        return open_for >= self.max_seconds

    def _savepoint(self, conn: Any, group: _Group) -> Any:
        """Set the next handler's savepoint; the connection to go on with."""
        try:
            self.ops.savepoint(conn, group)
            group.savepoint = True
        except GroupLost:  # what the group wrote is gone or unknown (MySQL's first savepoint)
            if not self._lost(conn, group):
                return self._drop(conn, group)
        except DatabaseError:
            group.savepoint = False  # the next failure rolls the whole transaction back
        return conn

    def _commit(self, conn: Any, group: _Group) -> tuple[Any, list[Claim]]:
        """Unstarted tasks back (the group closed early), commit, claim the next group."""
        try:
            if not self.ex.store.in_transaction(conn):
                self.ex.store.begin(conn)  # a replacement connection (the group's was broken)
            self._give_back_waiting(conn, group)
            limit = self._claim_limit()
            finished = [task for task, _ in group.written]
            self.claims.ended_all(finished)  # before the look below, as a single commit does
            # A limited task may start: it is claimed after the commit (group_claim.py).
            limited = bool(limit) and self.claims.limited_due()
            stepping_back = bool(limit) and not limited and self._steps_back(group)
            if stepping_back:
                limit = 0
            self._asked.limit = limit  # when limited, _claim_next_group below says
            if limit and not limited:
                self._claim_started()
            started = time.perf_counter()
            try:
                claims = self.ops.commit(conn, group.written, 0 if limited else limit, group=group)
            except BaseException:
                if stepping_back:
                    self._count_active(True)  # it goes on draining after all
                raise
            self.claims.committed(started, claims)
        except (DatabaseError, GroupLost) as exc:
            conn = self._commit_failed(conn, group, exc)
            # Go on draining (what went back to the queue is ready now, and no wake-up
            # announces it), one task at a time if the group's tasks are suspects.
            return conn, [] if conn is None else self._claim_next_group(conn)
        self._committed(finished)
        if stepping_back:
            with self._lock:
                self._asked.stepped_back = self._claims_started
            return conn, []
        return conn, self._claim_next_group(conn, limit) if limited else claims

    def _commit_failed(self, conn: Any, group: _Group, exc: BaseException) -> Any:
        """The group's commit failed (a deferred constraint, a serialization failure, a lost
        connection): nothing of it was committed, its next claim neither.

        One finished task: its commit failed, its attempt failed, exactly as with one
        commit per task. Several: nothing tells whose work failed the commit, so none has
        failed its attempt; they go back to 'pendente' (the retry's count untouched) and
        run alone from now on (group_isolation.py), where the culprit fails by itself.
        Returns a connection or None."""
        queue = self.ex.settings.queue_name
        # The unstarted tasks given back in the failed transaction are still claimed.
        group.waiting.extend(reversed(group.released))
        group.released = []
        if isinstance(exc, AttemptFenced):
            # The others go back to the queue (no suspect among them); the rescued one is
            # left to the attempt its rescuer created.
            logger.warning(
                "queue=%s: a task of a group of %d was rescued by another worker while it ran "
                "(%s); the group's work was rolled back, its other tasks go back to the queue",
                queue,
                len(group.written),
                exc,
            )
        elif len(group.written) > 1:
            logger.warning(
                "queue=%s: committing a group of %d finished tasks failed (%s); they go back "
                "to the queue and run one commit each until they ran again",
                queue,
                len(group.written),
                exc,
            )
            self.isolation.suspect(task.id for task, _ in group.written)
        else:
            logger.warning("queue=%s: committing a group failed (%s)", queue, exc)
            error = exc.__cause__ or exc
            written, group.written = group.written, []
            for task, _ in written:
                if not self.ex._fail(task, conn, error):
                    conn = self.ex._discard(conn)
        # The suspects go back with the unstarted tasks, from a fresh connection. A
        # connection that cannot go on (still in a transaction: aborted, or broken) is closed
        # first: its liveness locks go with it before the tasks are 'pendente' again, where
        # another worker's claim could meet them still held. Where giving back failed, the
        # connection holding their liveness locks is closed, so that the retry service can
        # rescue them.
        if conn is not None and self.ex.store.in_transaction(conn):
            conn = self.ex._discard(conn, replace=False)
        given_back = self._after_broken(group)
        if given_back and conn is not None:
            return conn
        return self.ex._discard(conn)

    def _commit_finished(self, conn: Any, group: _Group) -> Any:
        """Commit the group's finished tasks; its claimed ones go on in a new transaction."""
        try:
            # Slow handlers: keep what the recent pace runs in QUEUE_BATCH_MAX_MS.
            self._give_back_waiting(conn, group, keep=self._claim_limit())
            self.ops.commit(conn, group.written, 0, chain=True, group=group)
            if not self.ex.store.in_transaction(conn):
                self.ex.store.begin(conn)
        except (DatabaseError, GroupLost) as exc:
            # The group is emptied: _run_group commits nothing and claims again.
            return self._commit_failed(conn, group, exc)
        self._committed([task for task, _ in group.written])
        group.written, group.failures, group.released = [], [], []
        group.savepoint, group.tx, group.started = False, None, time.monotonic()
        self.ex._wake_idle_thread()  # tasks given back: an idle executor may take them
        return conn

    def _committed(self, tasks: list[TaskRecord]) -> None:
        self.claims.ended_all(tasks)
        self.ex._succeeded_all(tasks)

    # -- failures --

    def _failed(self, conn: Any, group: _Group, task: TaskRecord, error: BaseException) -> Any:
        """Roll the failed handler back and write its failure in the group's transaction.

        Returns the connection to go on with (None: none could be had).
        """
        ex = self.ex
        try:
            if group.savepoint and ex.store.in_transaction(conn):
                self.ops.rollback_to_savepoint(conn)
            else:
                # (Also where the handler ended the transaction: its own failure says so.)
                if (group.written or group.failures) and not self._lost(conn, group):
                    ex._fail(task, conn, error)
                    return self._drop(conn, group)
                ex.store.rollback_and_begin(conn)
        except Exception:  # noqa: BLE001 - the connection is gone: settle elsewhere
            ex._fail(task, conn, error)  # records on a fresh connection
            return self._drop(conn, group)
        group.savepoint = False
        status, recorded, decision = ex._account_failure(task, conn, error)
        settle = _Settle(status, recorded, decision)
        try:
            self._settle_failure(conn, task, settle)
            group.failures.append((task, settle))
        except Exception as exc:  # noqa: BLE001 - recorded again below, on a fresh connection
            # A deadlock here (MySQL: two executors' groups) ends the whole transaction. The
            # failure goes with the group's other tasks to a fresh connection, once this one
            # is closed: its transaction's row locks would block that connection's updates.
            logger.warning(
                "queue=%s task=%s: recording the failure failed (%s); recording it again on a "
                "fresh connection",
                ex.settings.queue_name,
                task.id,
                exc,
            )
            group.failures.append((task, settle))
            conn = ex._discard(conn)
            self._after_broken(group)
            return conn
        return conn

    def _after_broken(self, group: _Group) -> bool:
        """The group's transaction is gone with its connection: settle the rest on a fresh
        one. False when that failed."""
        tasks, failures = group.take()
        if tasks or failures:
            return self._give_back(tasks, failures, None, None)
        return True

    def _lost(self, conn: Any, group: _Group) -> bool:
        """The transaction ended under the group (or must be rolled back): settle what it
        had written, then open a new one for the group's next handlers.

        False when that settling failed on every try: those tasks are still 'processando'
        with their liveness locks held by ``conn``, so the caller must not go on with it
        but end the group with ``_drop``."""
        try:
            committed = self.ops.transaction_committed(conn, group)
        except DatabaseError:
            committed = None
        waiting, group.waiting = group.waiting, collections.deque()
        tasks, failures = group.take()
        group.waiting = waiting
        try:
            self.ex.store.rollback(conn)  # the server may still hold an aborted transaction
        except DatabaseError:
            pass
        if not self._give_back(tasks, failures, conn, committed):
            return False
        try:
            self.ex.store.begin(conn)
        except DatabaseError:
            pass  # the next statement on conn fails and is handled there
        return True

    def _drop(self, conn: Any, group: _Group) -> Any:
        """End a group whose tasks could not be given back on its connection, which is
        alive and holds their liveness locks: closed, it frees them, and the retry service
        rescues those tasks (their work was rolled back or is known by their rows: nothing
        runs twice, nothing is lost). Pooled again, it would keep them 'processando' for its
        whole life. The group's unstarted tasks go back from a fresh connection, after the
        close (their locks gone with it). Returns a fresh connection, or None."""
        self.ex._discard(conn, replace=False)
        self._after_broken(group)
        return self.ex._discard(None)

    def _give_back(
        self,
        tasks: list[tuple[TaskRecord, str | None]],
        failures: list[tuple[TaskRecord, _Settle]],
        conn: Any,
        committed: bool | None,
    ) -> bool:
        """Settle the tasks of a group whose transaction is gone (``committed``: whether it
        committed, None: unknown, the rows say). A success that was committed counts as
        done (written now if it was left for the group's commit); any other task goes back
        to 'pendente' (its work was rolled back: as far as the queue is concerned its
        attempt never ran); a failure whose record was lost is recorded again.

        A deadlock with another executor's claim (MySQL's gap locks) is worth another
        try. False when every try failed: the caller frees the tasks' liveness locks."""
        ex = self.ex
        for attempt in range(1, GIVE_BACK_ATTEMPTS + 1):
            try:
                if conn is None:
                    with ex.pool.connection() as fresh:
                        self._give_back_on(fresh, tasks, failures, committed)
                else:
                    self._give_back_on(conn, tasks, failures, committed)
                return True
            except Exception as exc:  # noqa: BLE001 - tried again, then left to the rescue
                if conn is not None:
                    try:
                        ex.store.rollback(conn)
                    except Exception:  # noqa: BLE001 - a broken connection: the next try says
                        pass
                if attempt == GIVE_BACK_ATTEMPTS:
                    logger.warning(
                        "queue=%s: could not give back tasks %s (%s); the retry service will "
                        "rescue them",
                        ex.settings.queue_name,
                        [task.id for task, _ in tasks],
                        exc,
                    )
        return False

    def _give_back_on(
        self,
        conn: Any,
        tasks: list[tuple[TaskRecord, str | None]],
        failures: list[tuple[TaskRecord, _Settle]],
        committed: bool | None,
    ) -> None:
        store: Any = self.ex.store  # a queue store: get_task is among its client operations
        store.begin(conn)
        done = []
        try:
            for task, settle in failures:
                row = store.get_task(conn, task.id)
                if row is not None and row.get("status") == model.PROCESSANDO:
                    self._settle_failure(conn, task, settle)
            for task, mensagem in tasks:
                if mensagem is not None and committed is not False:
                    if committed is True and store.complete_if_running(conn, task.id, mensagem):
                        done.append(task)
                        self.ex.liveness.unlock_in_transaction(conn, task)
                        continue
                    row = store.get_task(conn, task.id)
                    if row is not None and row.get("status") == model.SUCESSO:
                        done.append(task)
                        continue
                if self._release(conn, task, started=mensagem is not None):
                    logger.info(
                        "queue=%s task=%s: back to the queue (%s)",
                        self.ex.settings.queue_name,
                        task.id,
                        GROUP_LOST,
                    )
            store.commit(conn)
        except BaseException:
            store.rollback(conn)
            raise
        self._committed(done)

    def _give_back_waiting(self, conn: Any, group: _Group, keep: int = 0) -> None:
        """Unstarted tasks of a group beyond ``keep``: 'pendente' again, in its transaction
        (the last claimed first: the queue's order stays)."""
        while len(group.waiting) > keep:
            claim = group.waiting.pop()
            group.released.append(claim)
            self._release(conn, claim.task, started=False)

    def _release(self, conn: Any, task: TaskRecord, started: bool) -> bool:
        """A claimed task whose attempt did not count goes back to 'pendente', its liveness
        lock released; True if it did. One whose cancel was requested meanwhile ends
        'cancelada' instead: cancel_task told its caller it would stop, and given back it
        could start anywhere."""
        store = self.ex.store
        mensagem = CANCELLED_WHILE_RUNNING if started else CANCELLED_MESSAGE
        if store.cancel_if_requested(conn, task.id, mensagem):
            logger.info("queue=%s task=%s: cancelled", self.ex.settings.queue_name, task.id)
            released = False
        else:
            released = bool(store.release(conn, task.id))
        self.ex.liveness.unlock_in_transaction(conn, task)
        return released

    def _settle_failure(self, conn: Any, task: TaskRecord, settle: _Settle) -> None:
        ex = self.ex
        settle_failure(
            ex.store,
            conn,
            ex.policies,
            task,
            settle.recorded,
            status=settle.status,
            decision=settle.decision,
        )
        ex.liveness.unlock_in_transaction(conn, task)

    # -- a task given up after its timeout (TaskExecutor.given_up) --

    def given_up(self, item: RunningTask) -> None:
        """Its session was ended: the group's other tasks go back from a fresh connection."""
        with self._lock:
            group = self._groups.get(item.thread_id or 0)
            if group is None or group.abandoned:
                return
            group.abandoned = True
            tasks, failures = group.take()
        if tasks or failures:
            self._give_back(tasks, failures, None, False)


def group_drain(executor: TaskExecutor) -> GroupDrain | None:
    """The executor's group drain when its batch size (QUEUE_BATCH_SIZE, else the default)
    is above one and its handlers, database and liveness locks allow it; None (one commit
    per task) otherwise. Where they do not, only a QUEUE_BATCH_SIZE the user set is worth a
    warning: the default falls back to one commit per task without a word."""
    settings = executor.settings
    if settings.batch_size <= 1:
        return None
    if settings.queue_batch_size is None and driver_module_name(settings.db_driver) != "postgres":
        # On by default on PostgreSQL only: MySQL/MariaDB groups deadlock with each other
        # under lock-key contention (InnoDB's gap locks) and a task one group gives back can
        # be claimed while its liveness lock is still held (docs/group-commit.md).
        return None
    ops = group_ops_for(settings.db_driver, executor.store)
    # Measured and limited livenesses wrap the one that takes the locks.
    chain = liveness_chain(executor.liveness)
    in_database = any(isinstance(liveness, DatabaseLiveness) for liveness in chain)
    synchronous = type(executor) is TaskExecutor  # the async executor commits per task
    if ops is None or not synchronous or not in_database:
        if settings.queue_batch_size is not None:
            logger.warning(
                "queue=%s: QUEUE_BATCH_SIZE=%s ignored: group commit needs synchronous "
                "handlers on PostgreSQL or MySQL/MariaDB with the liveness locks in the "
                "database (not CLIENT_SERVER_MODE nor QUEUE_COMPAT_1_2_2); one commit per task",
                settings.queue_name,
                settings.queue_batch_size,
            )
        return None
    return GroupDrain(executor, ops)
