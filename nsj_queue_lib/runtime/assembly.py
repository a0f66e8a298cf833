"""One assembly step: the worker's parts, each given its collaborators in its constructor.

``WorkerParts`` holds what a worker builds before it reaches the database
(store, pool, socket-server client, limiter, metrics); once the queue is
bound, the plan (``plan.py``) decides the drain and ``build_executor`` builds
it, then the lifecycle thread and the services that need what the bind found
(nsj-queue-lib 1.2.2's keys, QUEUE_COMPAT_1_2_2).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from nsj_queue_lib.context import TaskContext
from nsj_queue_lib.db.driver import ConnectionPool, Driver
from nsj_queue_lib.db.task_session import TaskSession
from nsj_queue_lib.observability.observer import NULL_OBSERVER, Observer
from nsj_queue_lib.retry_policy import RetryPolicies
from nsj_queue_lib.runtime.async_slots import AsyncSlots
from nsj_queue_lib.runtime.attempt import Attempts, TaskHandler
from nsj_queue_lib.runtime.connections import Connections
from nsj_queue_lib.runtime.drain_group import GroupDrain
from nsj_queue_lib.runtime.drain_single import SingleDrain
from nsj_queue_lib.runtime.executor import Drain, Slots, TaskExecutor
from nsj_queue_lib.runtime.failures import Failures
from nsj_queue_lib.runtime.group_claim import GroupClaims
from nsj_queue_lib.runtime.limited import LimitedLiveness
from nsj_queue_lib.runtime.liveness import Liveness
from nsj_queue_lib.runtime.plan import DrainPlan
from nsj_queue_lib.runtime.running import RunningTask, RunningTasks
from nsj_queue_lib.runtime.slots import ThreadSlots
from nsj_queue_lib.runtime.tokens import WakeTokens
from nsj_queue_lib.settings import Settings

# Whether a task's handler is a coroutine function (WorkerBase.handler_is_async).
AsyncRoute = Callable[[dict[str, Any]], bool]


class NoGroups:
    """The drain of the async slots: one commit per task, nothing outlives a task."""

    def open(self) -> bool:
        return False

    def given_up(self, item: RunningTask) -> None:
        return None


@dataclasses.dataclass(frozen=True)
class ExecutorInputs:
    """What every executor is built from, whatever its plan."""

    settings: Settings
    pool: ConnectionPool
    handler: TaskHandler
    stop: threading.Event
    driver: Driver
    policies: RetryPolicies
    observer: Observer = NULL_OBSERVER
    # Called when a handler is done, before its task is settled (its last progress).
    after_handler: Callable[[TaskContext], None] = lambda context: None
    async_route: AsyncRoute | None = None


def build_executor(
    plan: DrainPlan,
    inputs: ExecutorInputs,
    session: TaskSession,
    liveness: Liveness,
    *,
    limited: LimitedLiveness | None = None,
    measured: Observer | None = None,
) -> TaskExecutor:
    """The executor ``plan`` says, over ``session`` (its liveness locks where ``liveness``
    says: the async slots await its claims). ``limited``: the limited claim a
    commit group tries first; ``measured``: where a group reports its claims (metrics)."""
    s = inputs.settings
    attempts, failures = _attempt_parts(inputs, session, liveness)
    slots: Slots
    drain: Drain
    if plan.asynchronous:
        assert inputs.async_route is not None
        handler_connection: Callable[[Any], Awaitable[Any]] = inputs.driver.async_handler_connection
        slots = AsyncSlots(
            attempts,
            failures,
            inputs.stop,
            count=s.queue_concurrency,
            pool_size=s.async_pool_size,
            is_async=inputs.async_route,
            handler_connection=handler_connection,
        )
        drain = NoGroups()
    else:
        tokens = WakeTokens(s.queue_concurrency, inputs.stop)
        if plan.group_commit:
            assert session.groups
            drain = GroupDrain(
                attempts,
                failures,
                GroupClaims(session, limited, measured),
                tokens,
                inputs.stop,
                size=s.batch_size,
                max_ms=s.queue_batch_max_ms,
            )
        else:
            drain = SingleDrain(attempts, failures, inputs.stop, tokens.wake_one_idle)
        slots = ThreadSlots(
            s.queue_name, s.queue_concurrency, drain, tokens, attempts.running, inputs.stop
        )
    return TaskExecutor(
        attempts.running,
        failures,
        slots,
        drain,
        inputs.driver.terminate_session,
        asynchronous=plan.asynchronous,
        group_commit=plan.group_commit,
    )


def _attempt_parts(
    inputs: ExecutorInputs, session: TaskSession, liveness: Liveness
) -> tuple[Attempts, Failures]:
    """The protocol of one attempt and of its failure, over one registry of running tasks."""
    s = inputs.settings
    running = RunningTasks()
    connections = Connections(s.queue_name, inputs.pool)
    attempts = Attempts(
        s.queue_name,
        session,
        liveness,
        running,
        connections,
        inputs.handler,
        policies=inputs.policies,
        observer=inputs.observer,
        after_handler=inputs.after_handler,
    )
    failures = Failures(
        s.queue_name,
        session,
        connections,
        inputs.policies,
        running,
        inputs.observer,
        inputs.driver.is_connection_lost,
    )
    return attempts, failures
