"""A failed attempt: how it is decided, logged, counted and written.

Every drain settles a failure here: ``account`` decides it once (the retry
policy, or a release when the worker's own connection was lost, or a cancel)
into a ``FailureRecord``, which the task session writes
(``db/task_session.py``; conditional on the row still being 'processando', so
two workers never both settle one attempt): ``fail`` on the task's
connection, or on a fresh one when that connection is gone; a commit group
writes it in its own transaction (``group_recovery.py``).

A server shutdown, a failover or a network loss is nobody's fault in the
task: such an attempt is settled like a shutdown release ('falha_processando',
its next attempt due at once), not as the handler's failure with its back-off.
Which exceptions mean "the connection is gone" is each driver's to say
(``Driver.is_connection_lost``).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.db.queue_store import WorkerStore
from nsj_queue_lib.db.task_session import (
    BURY,
    CANCELLED,
    FINAL,
    RETRY,
    FailureRecord,
    TaskSession,
    write_failure,
)
from nsj_queue_lib.exceptions import TaskCancelled, TaskHeld, TaskRefused
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.observability import observer as outcomes
from nsj_queue_lib.observability.observer import Observer
from nsj_queue_lib.retry_policy import (
    Decision,
    Outcome,
    RetryPolicies,
    bounded,
    failure_message,
)
from nsj_queue_lib.runtime.connections import Connections
from nsj_queue_lib.runtime.running import RunningTasks

logger = get_logger("executor")

# (the task's connection, the error) -> whether the connection itself was lost.
ConnectionLost = Callable[[Any, BaseException], bool]


class TaskTimeout(Exception):
    """The attempt ran past its timeout; its ``mensagem`` is the text, starting "timeout"."""


@dataclasses.dataclass(frozen=True)
class Settlement:
    """How a failed attempt is recorded: its status, what is said, and the decision (None:
    the retry policy decides when it is recorded; a cancel has none)."""

    status: str
    error: BaseException | str
    decision: Decision | None


def settlement(
    conn: Any, error: BaseException, decision: Decision, connection_lost: ConnectionLost | None
) -> Settlement:
    """A handler's failure as itself, or a lost connection as a release for a new attempt."""
    if connection_lost is None or not connection_lost(conn, error):
        return Settlement(model.FALHA, error, decision)
    why = f"the worker's database connection was lost while the task ran ({error})".strip()
    released = (
        dataclasses.replace(decision, delay_seconds=0.0)
        if decision.outcome is Outcome.RETRY
        else decision
    )
    return Settlement(model.FALHA_PROCESSANDO, f"{why}; released for a new attempt", released)


def failure_record(
    policies: RetryPolicies,
    task: TaskRecord,
    error: BaseException | str,
    status: str = model.FALHA,
    delay_seconds: float | None = None,
    decision: Decision | None = None,
) -> FailureRecord:
    """How a failed attempt is written (``db/task_session.py`` writes it).

    ``TaskCancelled`` (the handler stopped on a cancel request, or raised it on its own)
    ends 'cancelada'; a ``TaskTimeout`` is a failure whose mensagem is its text; anything
    else as the retry policy decides (``decision``: the one already logged)."""
    if isinstance(error, TaskRefused):
        return FailureRecord(CANCELLED, status, bounded(error.mensagem, model.MENSAGEM_LIMIT))
    if isinstance(error, TaskCancelled):
        return FailureRecord(CANCELLED, status, model.CANCELLED_WHILE_RUNNING)
    if isinstance(error, TaskTimeout):
        error = str(error)
    if decision is None:
        decision = policies.decide(task, error)
    max_retry = policies.for_task(task).max_retry
    mensagem = failure_message(error, decision, max_retry, model.MENSAGEM_LIMIT)
    if decision.outcome is Outcome.RETRY:
        delay = decision.delay_seconds if delay_seconds is None else delay_seconds
        return FailureRecord(RETRY, status, mensagem, delay_seconds=delay)
    if decision.outcome is Outcome.BURY:
        return FailureRecord(BURY, status, mensagem, payload=task.payload)
    return FailureRecord(FINAL, status, mensagem)


def settle_failure(
    store: WorkerStore,
    conn: Any,
    policies: RetryPolicies,
    task: TaskRecord,
    error: BaseException | str,
    status: str = model.FALHA,
    delay_seconds: float | None = None,
) -> int | None:
    """Write a failed 'processando' attempt in ``conn``'s open transaction (``failure_record``
    says how; an attempt whose cancel was requested ends 'cancelada'). The id of the row
    enqueued after it (next attempt or dead letter), or None."""
    record = failure_record(policies, task, error, status, delay_seconds)
    return write_failure(store, conn, task.id, record, task.row)


class Failures:
    """Decide, log, count and write the failed attempts of one worker."""

    def __init__(
        self,
        queue_name: str,
        session: TaskSession,
        connections: Connections,
        policies: RetryPolicies,
        running: RunningTasks,
        observer: Observer,
        connection_lost: ConnectionLost | None,
    ):
        self.queue_name = queue_name
        self.session = session
        self.connections = connections
        self.policies = policies
        self.running = running
        self.observer = observer
        self.connection_lost = connection_lost

    def account(self, task: TaskRecord, conn: Any, error: BaseException) -> FailureRecord:
        """Log and count a failed attempt; how to write it."""
        if isinstance(error, TaskCancelled):
            logger.info("queue=%s task=%s: cancelled (%s)", self.queue_name, task.id, error)
            self.observer.task_finished(task, outcomes.CANCELADA)
            return failure_record(self.policies, task, error)
        if isinstance(error, TaskHeld):
            # Not run: no failure, no outcome; the next attempt keeps the tentativa.
            logger.info("queue=%s task=%s: held (%s)", self.queue_name, task.id, error)
            self.observer.attempt_abandoned(task, str(error))
            mensagem = bounded(str(error), model.MENSAGEM_LIMIT)
            return FailureRecord(
                RETRY, model.FALHA_PROCESSANDO, mensagem, delay_seconds=error.delay_s, counted=False
            )
        self.observer.attempt_failed(task, error)
        # A lost connection is a release for a new attempt, not the handler's failure.
        settled = settlement(conn, error, self.policies.decide(task, error), self.connection_lost)
        decision = settled.decision
        assert decision is not None
        self.log_failure(task, error, decision)
        self.running.count_failed()
        self.observer.task_finished(
            task, outcomes.FALHA if decision.outcome is Outcome.RETRY else outcomes.DEAD
        )
        return failure_record(
            self.policies, task, settled.error, status=settled.status, decision=decision
        )

    def fail_and_release(self, task: TaskRecord, conn: Any, error: BaseException) -> bool:
        """``fail``, then the liveness' release; False when ``conn`` turned out broken."""
        healthy = self.fail(task, conn, error)
        self.session.after_settled(task, conn if healthy else None)
        return healthy

    def fail(self, task: TaskRecord, conn: Any, error: BaseException) -> bool:
        """Write a failed attempt; False when ``conn`` turned out broken."""
        record = self.account(task, conn, error)
        try:
            self.session.fail(conn, task, record)
            return True
        except Exception as exc:  # noqa: BLE001 - the task's connection is gone
            logger.info(
                "queue=%s task=%s: recording the failure on a fresh connection (%s)",
                self.queue_name,
                task.id,
                exc,
            )
        # The liveness lock died with the connection; the conditional update makes a race
        # with the retry service harmless.
        try:
            with self.connections.fresh() as fresh:
                self.session.fail_elsewhere(fresh, task, record)
        except Exception as exc:  # noqa: BLE001 - any error: the retry service rescues the task
            logger.warning(
                "queue=%s task=%s: could not record the failure (%s); the retry service will "
                "rescue the task",
                self.queue_name,
                task.id,
                exc,
            )
        return False

    def fail_elsewhere(
        self,
        conn: Any,
        task: TaskRecord,
        error: BaseException | str,
        status: str,
        delay_seconds: float | None = None,
    ) -> int | None:
        """A running attempt ended from outside (its session was ended: a timeout given
        up, a stopping worker's release), written on ``conn``; the row enqueued after it."""
        record = failure_record(self.policies, task, error, status, delay_seconds)
        return self.session.fail_elsewhere(conn, task, record)

    def log_failure(self, task: TaskRecord, error: BaseException, decision: Decision) -> None:
        """One line per failed attempt, with its traceback and what comes next."""
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
            self.queue_name,
            task.id,
            task.tentativa,
            self.policies.for_task(task).max_retry,
            type(error).__name__,
            error,
            then,
            exc_info=error,  # the exception's own traceback: this runs outside its except block
        )
