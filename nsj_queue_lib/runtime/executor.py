"""Executor threads: each claims its own tasks and runs them in transactions.

An executor thread holds a pooled connection while it has work. On it:
1. the claim marks one ready task 'processando' and takes the task's
   liveness lock (a session-level advisory lock the retry service checks) in
   the same statement, before the claim commits;
2. the handler runs in a transaction on that connection;
3. success: 'sucesso' + unlock, the claim of the next task and the commit
   of both in one round trip (the store's ``complete_and_claim``); failure:
   rollback, then 'falha' and the next attempt (or the dead letter) while the
   liveness lock is still held, then unlock and commit.
A thread that claimed a task wakes another idle one and claims again when it
is done, so a burst drains without further notifications. Whatever happens,
a task ends settled or 'processando' without a liveness lock, which the
retry service rescues: it is never lost.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.context import TIMED_OUT, TaskContext, running
from nsj_queue_lib.db.driver import ConnectionPool, close_quietly
from nsj_queue_lib.db.queue_store import WorkerStore
from nsj_queue_lib.exceptions import (
    AttemptFenced,
    DatabaseError,
    HandlerTransactionError,
    TaskCancelled,
)
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import Claim, TaskRecord
from nsj_queue_lib.observability import observer as outcomes
from nsj_queue_lib.observability.observer import NULL_OBSERVER, Observer
from nsj_queue_lib.retry_policy import Decision, Outcome, RetryPolicies, bounded, failure_message
from nsj_queue_lib.runtime.infrastructure import ConnectionLost, settlement
from nsj_queue_lib.runtime.liveness import Liveness
from nsj_queue_lib.settings import Settings

logger = get_logger("executor")

TaskHandler = Callable[[dict[str, Any], Any], "str | None"]
# Ends another connection's server session (the driver's terminate_session).
SessionTerminator = Callable[[Any, Any], None]
DEFAULT_SUCCESS_MESSAGE = "Concluído com sucesso"
EARLY_STOPS_KEPT = 1024  # stop requests remembered for attempts not running here
RELEASED_MESSAGE = "worker stopped before the task finished; released for a new attempt"
CANCELLED_WHILE_RUNNING = "cancelled while running (QueueClient.cancel_task)"
HANDLER_ENDED_TRANSACTION = (
    "the handler committed or rolled back bd_conn; the worker commits the task's transaction "
    "itself (return to succeed, raise to roll back), so this attempt counts as failed"
)


# A running task's state (RunningTask.state), changed under the executor's lock.
RUNNING, FINISHING, ABANDONED = "running", "finishing", "abandoned"


@dataclasses.dataclass
class RunningTask:
    task: TaskRecord
    conn: Any
    started: float = dataclasses.field(default_factory=time.monotonic)
    context: TaskContext = dataclasses.field(init=False)
    # RUNNING until the handler is done: then FINISHING, or ABANDONED when the timeout
    # gave the task up (runtime/timeouts.py): its thread must not touch it any more.
    state: str = RUNNING
    thread_id: int | None = dataclasses.field(default_factory=threading.get_ident)
    timeout_message: str | None = None  # set when its timeout expired

    def __post_init__(self) -> None:
        self.context = TaskContext(self.task.id, self.task.row.get("id_inicial"))


class TaskTimeout(Exception):
    """The attempt ran past its timeout; its ``mensagem`` is the text, starting "timeout"."""


def settle_failure(
    store: WorkerStore,
    conn: Any,
    policies: RetryPolicies,
    task: TaskRecord,
    error: BaseException | str,
    status: str = model.FALHA,
    delay_seconds: float | None = None,
    decision: Decision | None = None,
) -> int | None:
    """``record_failure``, unless the attempt's cancel was requested: then it ends 'cancelada'
    (whether its handler stopped, failed or died after the request, it never runs again).

    ``TaskCancelled`` (the handler stopped on a cancel request, or raised it on its own)
    ends 'cancelada' too; a ``TaskTimeout`` is a failure whose mensagem is its text.
    """
    if isinstance(error, TaskCancelled):
        store.cancel_running(conn, task.id, CANCELLED_WHILE_RUNNING)
        return None
    if store.cancel_if_requested(conn, task.id, CANCELLED_WHILE_RUNNING):
        return None
    if isinstance(error, TaskTimeout):
        error = str(error)
    return record_failure(store, conn, policies, task, error, status, delay_seconds, decision)


def record_failure(
    store: WorkerStore,
    conn: Any,
    policies: RetryPolicies,
    task: TaskRecord,
    error: BaseException | str,
    status: str = model.FALHA,
    delay_seconds: float | None = None,
    decision: Decision | None = None,
) -> int | None:
    """Settle a failed 'processando' attempt inside the current transaction.

    Returns the id of the row enqueued after it (next attempt or dead letter),
    or None. Conditional on the row still being 'processando', so two workers
    can never both settle one attempt. ``decision``: the one already logged.
    """
    if decision is None:
        decision = policies.decide(task, error)
    max_retry = policies.for_processo(task.row.get("processo")).max_retry
    mensagem = failure_message(error, decision, max_retry, model.MENSAGEM_LIMIT)
    if decision.outcome is Outcome.RETRY:
        delay = decision.delay_seconds if delay_seconds is None else delay_seconds
        return store.fail_and_retry(conn, task.id, status, mensagem, delay)
    if decision.outcome is Outcome.BURY:
        return store.fail_and_bury(conn, task.id, status, mensagem, task.payload)
    store.fail_final(conn, task.id, status, mensagem)
    return None


class TaskExecutor:
    """``queue_concurrency`` threads sharing wake-up tokens and a connection pool."""

    def __init__(
        self,
        settings: Settings,
        store: WorkerStore,
        pool: ConnectionPool,
        handler: TaskHandler,
        stop: threading.Event,
        liveness: Liveness,
        terminate_session: SessionTerminator,
        policies: RetryPolicies | None = None,
        observer: Observer = NULL_OBSERVER,
        connection_lost: ConnectionLost | None = None,
    ):
        self.settings = settings
        self._connection_lost = connection_lost
        self.policies = policies if policies is not None else RetryPolicies.build(settings)
        self.observer = observer
        self.store = store
        self.pool = pool
        self.handler = handler
        self.stop_event = stop
        self.liveness = liveness
        self._terminate_session = terminate_session
        # Reentrant: a SIGTERM handler (WorkerRuntime.stop -> interrupt) runs in the main
        # thread between any two bytecodes, also while the supervisor holds this lock there.
        lock = threading.RLock()
        # The hot paths (once per task: _started, _ended, _handler_done, _succeeded) take
        # the lock itself: a Condition's ``with`` is two Python calls more around it.
        self._lock = lock
        self._cond = threading.Condition(lock)  # wake-up tokens for idle threads
        self._finished = threading.Condition(lock)  # a running task ended (for wait_idle)
        # wait_idle calls waiting on _finished (under the lock): with none, a task's end
        # notifies nobody, and skips the Condition's Python calls that would tell so.
        self._idle_waiters = 0
        self._tokens = 0
        self._idle_threads = 0
        self._running: dict[int, RunningTask] = {}
        self._stuck: list[threading.Thread] = []  # threads whose task was abandoned
        # Threads draining with a connection: they may hold claimed tasks not running yet.
        self._draining: collections.Counter[threading.Thread] = collections.Counter()
        # Stop requests for attempts not running here (yet): a cancel notified between a
        # claim's commit and the task's start is applied when it starts.
        self._early_stops: collections.OrderedDict[int, str] = collections.OrderedDict()
        # Called when a handler is done, before its task is settled (the last progress
        # reported is written then).
        self.after_handler: Callable[[TaskContext], None] = lambda context: None
        self._done = 0  # attempts that succeeded, since the start
        self._failed = 0  # attempts that failed, since the start
        # Group commit (QUEUE_BATCH_SIZE > 1, runtime/group_commit.py): set by the worker
        # runtime; None drains one commit per task.
        self.group: Any = None
        self._threads = [
            threading.Thread(target=self._thread_main, name=f"nsj-executor-{i}", daemon=True)
            for i in range(settings.queue_concurrency)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    # -- wake-ups --

    def wake(self, count: int = 1) -> None:
        """Let up to ``count`` threads try to claim (a token waits for a busy thread)."""
        with self._cond:
            self._tokens = min(self.settings.queue_concurrency, self._tokens + count)
            self._cond.notify(count)

    def interrupt(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _take_token(self, timeout: float | None = None) -> bool | None:
        """Wait, idle, for a wake-up token: True once taken, False when the worker stops,
        None when ``timeout`` seconds passed without one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._idle_threads += 1
            try:
                while self._tokens == 0 and not self.stop_event.is_set():
                    if deadline is None:
                        self._cond.wait()
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    self._cond.wait(remaining)
            finally:
                self._idle_threads -= 1
            if self.stop_event.is_set():
                return False
            self._tokens -= 1
            return True

    # -- observation --

    def running_tasks(self) -> list[RunningTask]:
        with self._cond:
            return list(self._running.values())

    def busy_threads(self) -> int:
        """Executor threads claiming or running tasks (not waiting for a wake-up)."""
        with self._cond:
            return sum(1 for t in self._threads if t.is_alive()) - self._idle_threads

    def totals(self) -> tuple[int, int]:
        """(attempts that succeeded, attempts that failed) since the start."""
        with self._cond:
            return self._done, self._failed

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no task runs, nor a commit group whose handlers returned is still to
        commit; False if some still run after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._finished:
            while (
                self._running
                or self._drains_in_flight()
                or (self.group is not None and self.group.open())
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle_waiters += 1
                try:
                    self._finished.wait(remaining)
                finally:
                    self._idle_waiters -= 1
        return True

    def _drains_in_flight(self) -> bool:
        """Under the lock: whether a drain may hold claimed tasks whose handlers have not
        started (or a task just ended and the next one claimed with it). A thread whose
        handler was given up after its timeout does not count: it was replaced."""
        return any(thread not in self._stuck for thread in self._draining)

    @contextlib.contextmanager
    def draining(self) -> Iterator[None]:
        """Around a drain, from its connection on: between a claim's commit and its
        handler's start the task is 'processando' but not yet in ``_running``, where a
        loaded machine can leave a thread for a long while; a stopping worker waits for
        it as for a running task, instead of exiting with the task left to the retry
        service."""
        thread = threading.current_thread()
        with self._finished:
            self._draining[thread] += 1
        try:
            yield
        finally:
            with self._finished:
                self._draining[thread] -= 1
                if self._draining[thread] <= 0:
                    del self._draining[thread]
                self._finished.notify_all()

    def dead_threads(self) -> list[threading.Thread]:
        """Executor threads that ended while the worker was not stopping."""
        if self.stop_event.is_set():
            return []
        return [thread for thread in self._threads if thread.ident and not thread.is_alive()]

    # -- tasks given up after their timeout (runtime/timeouts.py) --

    def request_stop(self, task_id: int, reason: str) -> bool:
        """Ask the running attempt ``task_id`` to stop; False when it does not run here."""
        with self._cond:
            item = self._running.get(task_id)
            if item is None:
                self._early_stops[task_id] = reason
                while len(self._early_stops) > EARLY_STOPS_KEPT:
                    self._early_stops.popitem(last=False)
                return False
        return item.context.request_stop(reason)

    def abandon(self, task_id: int) -> RunningTask | None:
        """Give up a task whose handler does not return: whatever the handler does from now on
        changes nothing (``_leave_behind``). The caller ends the task's session and settles
        the attempt. None when the handler finished meanwhile."""
        with self._finished:
            item = self._running.get(task_id)
            if item is None or item.state != RUNNING:
                return None
            item.state = ABANDONED
            del self._running[task_id]
            self._failed += 1
            self._finished.notify_all()
            self._leave_behind(item)
        self.wake(1)
        return item

    def _leave_behind(self, item: RunningTask) -> None:
        """Under the lock: a new thread takes the place of the abandoned task's thread."""
        current = [t for t in self._threads if t.ident == item.thread_id]
        replacement = threading.Thread(
            target=self._thread_main,
            name=f"nsj-executor-{len(self._threads) + len(self._stuck)}",
            daemon=True,
        )
        self._threads = [t for t in self._threads if t not in current] + [replacement]
        self._stuck.extend(current)
        replacement.start()

    def given_up(self, item: RunningTask) -> None:
        """An abandoned task's session was ended and its attempt settled (timeouts.py).

        Its thread was replaced when it was abandoned; the tasks its commit group held
        go back to the queue (group_commit.py)."""
        if self.group is not None:
            self.group.given_up(item)

    def stuck_threads(self) -> int:
        """Threads still running a handler that was given up."""
        with self._cond:
            self._stuck = [t for t in self._stuck if t.is_alive()]
            return len(self._stuck)

    def _retired(self) -> bool:
        """Whether this thread's task was given up (it was replaced: it ends)."""
        with self._cond:
            return threading.current_thread() in self._stuck

    def join(self, timeout: float) -> None:
        """Wait for the threads that started (none did when the worker was refused at start)."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(max(0.0, deadline - time.monotonic()))

    # -- the thread --

    def _thread_main(self) -> None:
        # A thread drains when woken (a token), or at once again after a drain that
        # stepped back and found nobody claimed what it freed (_after_group_drain).
        woken = False
        while not self._retired() and (woken or self._take_token()):
            woken = False
            try:
                if self.group is None:
                    self._drain()
                else:
                    woken = self._after_group_drain(self.group.drain())
            except BaseException:  # an executor thread must never die silently
                logger.exception(
                    "queue=%s: unexpected error in an executor thread", self.settings.queue_name
                )
                self.stop_event.wait(1.0)

    def _after_group_drain(self, stepped_back: int | None) -> bool:
        """After a group drain: whether the thread drains again at once. A drain that
        stepped back (runtime/group_commit.py) freed lock keys whose next tasks it left to
        the executors still draining; it waits idle (a wake-up takes it back) for
        QUEUE_BATCH_MAX_MS, then claims itself unless a claim that started since its
        commit saw those tasks: never is a freed task left with every executor idle."""
        if stepped_back is None:
            return False
        woken = self._take_token(timeout=self.settings.queue_batch_max_ms / 1000.0)
        if woken is not None:
            return woken
        return not self.stop_event.is_set() and not self.group.claimed_since(stepped_back)

    def _claim_next(self) -> bool:
        return not self.stop_event.is_set()

    def _connection(self) -> Any:
        """A pooled connection, or None (logged) when the database is unreachable: the
        dispatcher wakes the executors again once it is back."""
        try:
            return self.pool.getconn()
        except Exception as exc:  # noqa: BLE001 - pool timeout: database unreachable
            logger.warning(
                "queue=%s: no database connection for an executor (%s)",
                self.settings.queue_name,
                exc,
            )
            return None

    def _drain(self) -> None:
        """Claim and run tasks until none is ready or the worker stops."""
        conn = self._connection()
        if conn is None:
            return
        with self.draining():
            try:
                claimed = self.liveness.claim(conn, self._claim_next())
                while claimed is not None:
                    self._wake_idle_thread()  # there may be more: let an idle thread look too
                    conn, claimed = self._run(conn, claimed)
            except DatabaseError as exc:
                logger.warning("queue=%s: %s", self.settings.queue_name, exc)  # "claim failed: ..."
                conn = self._discard(conn, replace=False)
            except Exception as exc:  # noqa: BLE001 - the lock server is unreachable: claim again when woken
                logger.warning("queue=%s: claim abandoned: %s", self.settings.queue_name, exc)
            finally:
                self._put_back(conn)

    def _wake_idle_thread(self) -> None:
        self._wake_one_idle()

    def _wake_one_idle(self) -> bool:
        """Wake one idle thread, if one is idle and no token is left; whether it did."""
        with self._cond:
            if self._idle_threads and self._tokens == 0:
                self._tokens = 1
                self._cond.notify(1)
                return True
            return False

    def _started(self, conn: Any, claimed: Claim) -> RunningTask:
        """A claimed task starts running on ``conn`` (logged, listed as running, and asked to
        stop at once if a stop request came before it started)."""
        task = claimed.task
        if not claimed.liveness_locked:
            logger.warning(
                "queue=%s task=%s: liveness lock already held elsewhere",
                self.settings.queue_name,
                task.id,
            )
        if task.tentativa > 1:
            self._log_retry(task)
        item = RunningTask(task, conn)
        with self._lock:
            self._running[task.id] = item
            early = self._early_stops.pop(task.id, None)
        if early is not None:
            item.context.request_stop(early)
        return item

    def _ended(self, task: TaskRecord) -> None:
        with self._lock:
            self._running.pop(task.id, None)
            if self._idle_waiters:
                self._finished.notify_all()

    def _succeeded(self, task: TaskRecord) -> None:
        logger.debug("queue=%s task=%s: sucesso", self.settings.queue_name, task.id)
        with self._lock:
            self._done += 1
        self.observer.task_finished(task, outcomes.SUCESSO)

    def _succeeded_all(self, tasks: list[TaskRecord]) -> None:
        """``_succeeded`` for each of a commit group's tasks: counted under one lock, the
        disabled DEBUG line asked about once."""
        if not tasks:
            return
        if logger.isEnabledFor(logging.DEBUG):
            for task in tasks:
                logger.debug("queue=%s task=%s: sucesso", self.settings.queue_name, task.id)
        with self._lock:
            self._done += len(tasks)
        if self.observer is NULL_OBSERVER:
            return  # its task_finished does nothing
        finished = self.observer.task_finished
        for task in tasks:
            finished(task, outcomes.SUCESSO)

    def _run(self, conn: Any, claimed: Claim) -> tuple[Any, Claim | None]:
        """Run one claimed task; returns (the connection to go on with, the next claimed task)."""
        if self._transaction_gone(conn):
            return self._give_back_unstarted(conn, claimed.task)
        item = self._started(conn, claimed)
        task = item.task
        try:
            outcome = self._call_handler(item)
            if outcome is not None:
                self.after_handler(item.context)
            if isinstance(outcome, str):
                try:
                    next_claim = self.liveness.complete_and_claim(
                        conn, task, outcome, self._claim_next()
                    )
                    self._succeeded(task)
                    return conn, next_claim
                except AttemptFenced as exc:
                    self.fenced(task, exc)
                    self.liveness.after_settled(task, conn)
                    return conn, self.liveness.claim(conn, self._claim_next())
                except DatabaseError as exc:
                    # The commit itself failed (a deferred constraint, a lost
                    # connection): nothing was committed, so the attempt failed.
                    outcome = exc.__cause__ or exc
        finally:
            self._ended(task)
        if outcome is None:  # abandoned after its timeout: settled elsewhere, conn ended
            self._discard(conn, replace=False)
            return None, None
        healthy = self._fail_and_release(task, conn, outcome)
        if not healthy:
            replacement = self._discard(conn)
            if replacement is None:
                return None, None
            conn = replacement
        return conn, self.liveness.claim(conn, self._claim_next())

    def _call_handler(self, item: RunningTask) -> str | BaseException | None:
        """Run the handler: the ``mensagem`` of a success, the error of a failure, or None when
        the task was abandoned meanwhile (its timeout gave it up: nothing more to do)."""
        task, conn = item.task, item.conn
        try:
            with running(item.context):
                result = self.handler(task.row, conn)
            outcome: str | BaseException = self._success_message(conn, result)
        except BaseException as exc:  # noqa: BLE001 - SystemExit/KeyboardInterrupt fail the task too
            outcome = self._handler_error(task, exc)
        return self._handler_done(item, outcome)

    def _success_message(self, conn: Any, result: Any) -> str:
        """The ``mensagem`` of a handler's ``result``, once its transaction is still open."""
        if not self.store.in_transaction(conn):
            raise HandlerTransactionError(HANDLER_ENDED_TRANSACTION)
        return bounded(
            DEFAULT_SUCCESS_MESSAGE if result is None else str(result), model.MENSAGEM_LIMIT
        )

    def _handler_error(self, task: TaskRecord, exc: BaseException) -> BaseException:
        if not isinstance(exc, Exception):
            logger.warning(
                "queue=%s task=%s: handler raised %s; the task fails, the worker goes on",
                self.settings.queue_name,
                task.id,
                type(exc).__name__,
            )
        return exc

    def _handler_done(
        self, item: RunningTask, outcome: str | BaseException
    ) -> str | BaseException | None:
        """The handler's ``outcome``; None when its task was abandoned meanwhile."""
        with self._lock:
            if item.state == ABANDONED:
                return None
            item.state = FINISHING
        if item.context.stop_reason == TIMED_OUT:
            # Past its timeout the attempt fails, whatever the handler did.
            return TaskTimeout(item.timeout_message or "timeout")
        return outcome

    def _transaction_gone(self, conn: Any) -> bool:
        return not self.store.in_transaction(conn)

    def _give_back_unstarted(self, conn: Any, task: TaskRecord) -> tuple[Any, Claim | None]:
        """The task's transaction ended before its handler started (on Galera, a replicated
        write aborted it): run now, the handler's statements would commit one by one. The
        task goes back to 'pendente' instead; (the connection, the next claim)."""
        logger.warning(
            "queue=%s task=%s: its transaction was gone before its handler started; given "
            "back to the queue, not run",
            self.settings.queue_name,
            task.id,
        )
        try:
            self.store.begin(conn)
            self.store.release(conn, task.id)
            self.liveness.unlock_in_transaction(conn, task)
            self.store.commit(conn)
            self.liveness.after_settled(task, conn)
            return conn, self.liveness.claim(conn, self._claim_next())
        except DatabaseError as exc:
            # Closed, the connection frees its database locks; a lock on the socket server
            # goes here. Either way the retry service rescues the task.
            logger.warning(
                "queue=%s task=%s: giving back failed (%s)", self.settings.queue_name, task.id, exc
            )
            replacement = self._discard(conn)
            self.liveness.after_settled(task)
            return replacement, None

    def fenced(self, task: TaskRecord, error: BaseException) -> None:
        """The attempt's success was refused, its transaction rolled back: another worker
        rescued the task, whose new attempt runs the handler again (nothing to settle)."""
        logger.warning(
            "queue=%s task=%s: no longer 'processando' when its handler returned (rescued by "
            "another worker); its work was rolled back (%s)",
            self.settings.queue_name,
            task.id,
            error,
        )

    def _fail_and_release(self, task: TaskRecord, conn: Any, error: BaseException) -> bool:
        """``_fail``, then the liveness' release; False when ``conn`` turned out broken."""
        healthy = self._fail(task, conn, error)
        self.liveness.after_settled(task, conn if healthy else None)
        return healthy

    def _account_failure(
        self, task: TaskRecord, conn: Any, error: BaseException
    ) -> tuple[str, BaseException | str, Decision | None]:
        """Log and count a failed attempt; (status, error to record, decision) to settle it."""
        decision: Decision | None = None
        status = model.FALHA
        recorded: BaseException | str = error
        if isinstance(error, TaskCancelled):
            logger.info(
                "queue=%s task=%s: cancelled (%s)", self.settings.queue_name, task.id, error
            )
            self.observer.task_finished(task, outcomes.CANCELADA)
        else:
            # A lost connection is a release for a new attempt, not the handler's failure.
            settled = settlement(
                conn, error, self.policies.decide(task, error), self._connection_lost
            )
            decision, status, recorded = settled.decision, settled.status, settled.error
            self._log_failure(task, error, decision)
            with self._cond:
                self._failed += 1
            self.observer.task_finished(
                task, outcomes.FALHA if decision.outcome is Outcome.RETRY else outcomes.DEAD
            )
        return status, recorded, decision

    def _fail(self, task: TaskRecord, conn: Any, error: BaseException) -> bool:
        """Record a failed attempt; False when ``conn`` turned out broken."""
        status, recorded, decision = self._account_failure(task, conn, error)
        try:
            self.store.rollback_and_begin(conn)
            settle_failure(
                self.store, conn, self.policies, task, recorded, status=status, decision=decision
            )
            self.liveness.unlock_in_transaction(conn, task)
            self.store.commit(conn)
            return True
        except Exception as exc:  # noqa: BLE001 - the task's connection is gone
            logger.info(
                "queue=%s task=%s: recording the failure on a fresh connection (%s)",
                self.settings.queue_name,
                task.id,
                exc,
            )
        # The liveness lock died with the connection; the conditional update
        # makes a race with the retry service harmless.
        try:
            with self.pool.connection() as fresh:
                self.store.begin(fresh)
                settle_failure(
                    self.store,
                    fresh,
                    self.policies,
                    task,
                    recorded,
                    status=status,
                    decision=decision,
                )
                self.store.commit(fresh)
        except Exception as exc:  # noqa: BLE001 - any error: the retry service rescues the task
            logger.warning(
                "queue=%s task=%s: could not record the failure (%s); the retry service will "
                "rescue the task",
                self.settings.queue_name,
                task.id,
                exc,
            )
        return False

    def _log_retry(self, task: TaskRecord) -> None:
        logger.info(
            "queue=%s task=%s: attempt %s of %s, retrying task %s after %r",
            self.settings.queue_name,
            task.id,
            task.tentativa,
            self.policies.for_processo(task.row.get("processo")).max_retry,
            task.row.get("id_inicial"),
            task.row.get("mensagem_anterior"),
        )

    def _log_failure(self, task: TaskRecord, error: BaseException, decision: Decision) -> None:
        """One line per failed attempt, with its traceback and what comes next."""
        s = self.settings
        if decision.permanent:
            then = "a permanent error: not retried" + (
                "; its dead-letter task follows" if decision.outcome is Outcome.BURY else ""
            )
        elif decision.outcome is Outcome.RETRY:
            due = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
                seconds=decision.delay_seconds
            )
            then = f"next attempt at {due:%Y-%m-%d %H:%M:%S} UTC (in {decision.delay_seconds:g} s)"
        elif decision.outcome is Outcome.BURY:
            then = "no attempts left: its dead-letter task follows"
        else:
            then = "no attempts left: nothing follows (a dead-letter task)"
        logger.warning(
            "queue=%s task=%s: attempt %s of %s failed: %s: %s; %s",
            s.queue_name,
            task.id,
            task.tentativa,
            self.policies.for_processo(task.row.get("processo")).max_retry,
            type(error).__name__,
            error,
            then,
            exc_info=error,  # the exception's own traceback: this runs outside its except block
        )

    def _discard(self, conn: Any, replace: bool = True) -> Any:
        """Close a broken connection, give it back (the pool drops it) and take another, or None."""
        if conn is not None:
            close_quietly(conn)
            self._put_back(conn)
        if not replace:
            return None
        try:
            return self.pool.getconn()
        except Exception:  # noqa: BLE001 - the pool cannot serve now: the caller retries later
            return None

    def _put_back(self, conn: Any) -> None:
        if conn is None:
            return
        try:
            self.pool.putconn(conn)
        except Exception:  # noqa: BLE001 - a pool closed during shutdown
            close_quietly(conn)

    # -- shutdown --

    def release_running(self, connect: Callable[[], Any]) -> int:
        """After the grace period: end the tasks still running and schedule them again at once.

        Their backends are terminated (rolling back their work and freeing
        their locks), then each attempt is recorded as 'falha_processando'
        with its next attempt due now. Returns how many were released.
        """
        with self._cond:
            running = list(self._running.values())
            # The release settles these attempts: their threads, woken by the end of their
            # sessions, must not settle them too (as a lost connection, counted as a failure).
            # A task already FINISHING is its thread's to settle.
            releasing = [item for item in running if item.state == RUNNING]
            for item in releasing:
                item.state = ABANDONED
        if not running:
            return 0
        released = 0
        admin = connect()  # autocommit
        try:
            for item in running:
                try:
                    self._terminate_session(admin, item.conn)
                except Exception as exc:  # noqa: BLE001 - best effort: the retry service rescues the task
                    logger.warning(
                        "queue=%s task=%s: could not stop its session: %s",
                        self.settings.queue_name,
                        item.task.id,
                        exc,
                    )
            if self.group is not None:  # their groups' other tasks went with the sessions
                # Only the groups of the attempts released here: a FINISHING task's thread
                # goes on settling its own group (its commit fails with the session), and
                # settling it from here too would race with it.
                for item in releasing:
                    self.group.given_up(item)
            for item in releasing:
                self.store.begin(admin)
                try:
                    if (
                        settle_failure(
                            self.store,
                            admin,
                            self.policies,
                            item.task,
                            RELEASED_MESSAGE,
                            status=model.FALHA_PROCESSANDO,
                            delay_seconds=0.0,
                        )
                        is not None
                    ):
                        released += 1
                        self.observer.task_finished(item.task, outcomes.RELEASED)
                    self.store.commit(admin)
                except Exception:
                    self.store.rollback(admin)
                    raise
        finally:
            admin.close()
        return released
