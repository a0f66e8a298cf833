"""One claimed task's attempt: start it, run its handler in its transaction, tell the outcome.

Every drain (one commit per task, commit groups, the async slots) runs a
claimed task the same way:

1. ``start``: logged, listed as running (``running.py``), and asked to stop at
   once if a cancel came between its claim and now;
2. ``call_handler``: the handler runs with ``bd_conn`` inside the task's open
   transaction; the outcome is the success's ``mensagem`` (the transaction
   must still be open: a handler that committed or rolled back ``bd_conn``
   fails its attempt), the handler's error, a ``TaskTimeout`` once its
   timeout expired, or None when the timeout gave the task up meanwhile
   (settled elsewhere: the drain only drops its connection);
3. the drain writes the outcome through the task session
   (``db/task_session.py``): a success with its commit
   (``complete_and_claim``, or the group's ``settle_group``), a failure as
   ``failures.py`` decides it.

A task whose transaction is gone before its handler starts (on Galera a
replicated write can abort it) is given back to the queue, never run: its
handler's statements would commit one by one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.context import TIMED_OUT, TaskContext, running
from nsj_queue_lib.db.task_session import TaskSession
from nsj_queue_lib.exceptions import DatabaseError, HandlerTransactionError, TaskSuspended
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import Claim, TaskRecord
from nsj_queue_lib.observability import observer as outcomes
from nsj_queue_lib.observability.observer import NULL_OBSERVER, Observer
from nsj_queue_lib.retry_policy import RetryPolicies, bounded
from nsj_queue_lib.runtime.connections import Connections
from nsj_queue_lib.runtime.failures import TaskTimeout
from nsj_queue_lib.runtime.liveness import Liveness
from nsj_queue_lib.runtime.running import RunningTask, RunningTasks

logger = get_logger("executor")

TaskHandler = Callable[[dict[str, Any], Any], "str | None"]
DEFAULT_SUCCESS_MESSAGE = "Concluído com sucesso"
HANDLER_ENDED_TRANSACTION = (
    "the handler committed or rolled back bd_conn; the worker commits the task's transaction "
    "itself (return to succeed, raise to roll back), so this attempt counts as failed"
)


class Attempts:
    """The protocol of one claimed task, shared by every drain of a worker."""

    def __init__(
        self,
        queue_name: str,
        session: TaskSession,
        liveness: Liveness,
        running: RunningTasks,
        connections: Connections,
        handler: TaskHandler,
        *,
        policies: RetryPolicies,
        observer: Observer = NULL_OBSERVER,
        after_handler: Callable[[TaskContext], None] = lambda context: None,
    ):
        self.queue_name = queue_name
        self.session = session
        # Where the liveness locks live: the async slots await its claims (PostgreSQL).
        self.liveness = liveness
        self.running = running
        self.connections = connections
        self.handler = handler
        self.policies = policies
        self.observer = observer
        # Called when a handler is done, before its task is settled (the last progress it
        # reported is written then).
        self.after_handler = after_handler

    def start(self, conn: Any, claimed: Claim) -> RunningTask:
        """A claimed task starts running on ``conn``."""
        task = claimed.task
        if not claimed.liveness_locked:
            logger.warning(
                "queue=%s task=%s: liveness lock already held elsewhere", self.queue_name, task.id
            )
        if task.tentativa > 1:
            self._log_retry(task)
        return self.running.start(conn, task)

    def run_handler(self, item: RunningTask) -> str | BaseException | None:
        """``call_handler``, then ``after_handler`` unless the task was given up; always
        unlisted from the running tasks."""
        try:
            outcome = self.call_handler(item)
            if outcome is not None:
                self.after_handler(item.context)
            return outcome
        finally:
            self.running.end(item.task)

    def call_handler(self, item: RunningTask) -> str | BaseException | None:
        """Run the handler: the ``mensagem`` of a success, the error of a failure, or None when
        the task was abandoned meanwhile (its timeout gave it up: nothing more to do)."""
        task, conn = item.task, item.conn
        item.context.bd_conn, item.context.queue_table = conn, self.session.store.queue_table
        try:
            with running(item.context):
                result = self.handler(task.row, conn)
            outcome: str | BaseException = self.success_message(conn, result)
        except BaseException as exc:  # noqa: BLE001 - SystemExit/KeyboardInterrupt fail the task too
            outcome = self.handler_error(task, exc)
        return self.handler_done(item, outcome)

    def success_message(self, conn: Any, result: Any) -> str:
        """The ``mensagem`` of a handler's ``result``, once its transaction is still open."""
        if not self.session.handler_transaction_open(conn):
            raise HandlerTransactionError(HANDLER_ENDED_TRANSACTION)
        return bounded(
            DEFAULT_SUCCESS_MESSAGE if result is None else str(result), model.MENSAGEM_LIMIT
        )

    def handler_error(self, task: TaskRecord, exc: BaseException) -> BaseException:
        if not isinstance(exc, (Exception, TaskSuspended)):
            logger.warning(
                "queue=%s task=%s: handler raised %s; the task fails, the worker goes on",
                self.queue_name,
                task.id,
                type(exc).__name__,
            )
        return exc

    def handler_done(
        self, item: RunningTask, outcome: str | BaseException
    ) -> str | BaseException | None:
        """The handler's ``outcome``; None when its task was abandoned meanwhile."""
        if not self.running.finishing(item):
            return None
        if item.context.suspension is not None:
            # A durable wait committed the attempt's end (even if the handler caught it).
            return item.context.suspension
        if item.context.stop_reason == TIMED_OUT:
            # Past its timeout the attempt fails, whatever the handler did.
            return TaskTimeout(item.timeout_message or "timeout")
        return outcome

    # -- the outcome --

    def succeeded(self, task: TaskRecord) -> None:
        logger.debug("queue=%s task=%s: sucesso", self.queue_name, task.id)
        self.running.count_done()
        self.observer.task_finished(task, outcomes.SUCESSO)

    def succeeded_all(self, tasks: list[TaskRecord]) -> None:
        """``succeeded`` for each of a commit group's tasks: counted under one lock, the
        disabled DEBUG line asked about once."""
        if not tasks:
            return
        if logger.isEnabledFor(logging.DEBUG):
            for task in tasks:
                logger.debug("queue=%s task=%s: sucesso", self.queue_name, task.id)
        self.running.count_done(len(tasks))
        if self.observer is NULL_OBSERVER:
            return  # its task_finished does nothing
        finished = self.observer.task_finished
        for task in tasks:
            finished(task, outcomes.SUCESSO)

    def suspended(self, task: TaskRecord, suspension: TaskSuspended) -> None:
        """A durable wait ended the attempt without failing it (committed already)."""
        logger.debug("queue=%s task=%s: %s", self.queue_name, task.id, suspension.mensagem)

    def fenced(self, task: TaskRecord, error: BaseException) -> None:
        """The attempt's success was refused, its transaction rolled back: another worker
        rescued the task, whose new attempt runs the handler again (nothing to settle)."""
        self.observer.attempt_abandoned(task, "rescued by another worker while it ran")
        logger.warning(
            "queue=%s task=%s: no longer 'processando' when its handler returned (rescued by "
            "another worker); its work was rolled back (%s)",
            self.queue_name,
            task.id,
            error,
        )

    # -- a task that cannot start --

    def transaction_gone(self, conn: Any) -> bool:
        return not self.session.handler_transaction_open(conn)

    def give_back_unstarted(
        self, conn: Any, task: TaskRecord, claim_next: bool
    ) -> tuple[Any, Claim | None]:
        """The task's transaction ended before its handler started: it goes back to
        'pendente' instead of running; (the connection, the next claim)."""
        logger.warning(
            "queue=%s task=%s: its transaction was gone before its handler started; given "
            "back to the queue, not run",
            self.queue_name,
            task.id,
        )
        try:
            self.session.give_back_unstarted(conn, task)
            self.session.after_settled(task, conn)
            return conn, self.session.claim(conn, claim_next)
        except DatabaseError as exc:
            # Closed, the connection frees its database locks; a lock on the socket server
            # goes here. Either way the retry service rescues the task.
            logger.warning(
                "queue=%s task=%s: giving back failed (%s)", self.queue_name, task.id, exc
            )
            replacement = self.connections.discard(conn)
            self.session.after_settled(task)
            return replacement, None

    def _log_retry(self, task: TaskRecord) -> None:
        logger.info(
            "queue=%s task=%s: attempt %s of %s, retrying task %s after %r",
            self.queue_name,
            task.id,
            task.tentativa,
            self.policies.for_task(task).max_retry,
            task.row.get("id_inicial"),
            task.row.get("mensagem_anterior"),
        )
