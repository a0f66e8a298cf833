"""``InMemoryQueue``: run a worker's handlers against a queue in memory, in one thread.

Routing (``handle_task``: ``@Task`` methods, ``execute``, ``execute_dead``,
``@Subscriber``), the retry policies, ``PermanentError``, the pub/sub fan-out
and the failure bookkeeping are the library's own code; only the storage and
the clock are replaced. See docs/in-memory-queue.md.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import random
from typing import TYPE_CHECKING, Any, cast

from nsj_queue_lib import model
from nsj_queue_lib.context import CANCEL_REQUESTED, TaskContext, running
from nsj_queue_lib.flow.periodic import PeriodicSchedule
from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.pubsub import publish
from nsj_queue_lib.retry_policy import RetryPolicies, bounded
from nsj_queue_lib.runtime.attempt import DEFAULT_SUCCESS_MESSAGE
from nsj_queue_lib.runtime.failures import settle_failure
from nsj_queue_lib.runtime.periodic_service import slot_task_row
from nsj_queue_lib.settings import Settings
from nsj_queue_lib.testing.steps import MemoryCommits
from nsj_queue_lib.testing.store import UTC, MemoryConnection, MemoryStore, Row

if TYPE_CHECKING:
    from nsj_queue_lib.db.queue_store import QueueStore, WorkerStore
    from nsj_queue_lib.worker_base import WorkerBase

DEFAULT_MAX_ATTEMPTS = 10_000  # a run() bound: handlers that enqueue forever end with an error

# The subscribers and processos a worker handles (None: every one).
Handled = tuple[frozenset[str] | None, frozenset[str] | None]


class InMemoryQueue:
    """A queue without a database for application tests.

    ``max_retry`` and ``base_interval_retry`` (minutes) play QUEUE_MAX_RETRY and
    QUEUE_BASE_INTERVAL_RETRY; ``rng`` draws the exponential back-off's jitter
    (seed it for repeatable delays); ``now`` starts the clock (default: the
    current time), which moves only by ``advance`` and ``run``.
    """

    def __init__(
        self,
        *,
        max_retry: int = 100,
        base_interval_retry: float = 5.0,
        rng: random.Random | None = None,
        now: datetime.datetime | None = None,
    ) -> None:
        self.settings = Settings(
            db_host="in-memory",
            db_name="in-memory",
            db_user="in-memory",
            queue_name="in_memory",
            queue_table="in_memory",
            queue_max_retry=max_retry,
            queue_base_interval_retry=base_interval_retry,
        )
        self.rng = rng if rng is not None else random.Random()
        start = now or datetime.datetime.now(UTC)
        self.store = MemoryStore(start if start.tzinfo else start.replace(tzinfo=UTC))
        self.store.on_cancel_requested = self._cancel_requested
        self._running: dict[int, TaskContext] = {}  # the attempt a handler runs now

    # -- enqueue and subscribe --

    def connection(self) -> MemoryConnection:
        """A connection to build ``QueueClient(conn, "any.table")`` on: its tasks land here."""
        return MemoryConnection(self.store)

    def add_subscriber(
        self,
        subscriber_id: str,
        processo: str,
        *,
        url: str | None = None,
        http_method: str | None = "POST",
        headers: dict[str, Any] | None = None,
        tenant: int | None = None,
        grupo_empresarial: str | None = None,
        ativo: bool = True,
    ) -> None:
        self.store.subscribers.append(
            dict(
                id=subscriber_id,
                processo=processo,
                url=url,
                http_method=http_method,
                headers=headers,
                tenant=tenant,
                grupo_empresarial=grupo_empresarial,
                ativo=ativo,
                created_at=self.now,
            )
        )

    def enqueue_slot(
        self, worker: WorkerBase, processo: str, slot: datetime.datetime | None = None
    ) -> int | None:
        """Enqueue the task of a periodic processo's slot (``@Task(cron=)``/``every_s=``), as
        the workers' periodic thread does: ``slot`` (default: the latest due at ``now``) is
        taken to the schedule's slot at or before it; None when this queue enqueued that
        slot, or a later one, already (once per slot)."""
        schedule = self._schedule(worker, processo)
        due = schedule.latest_due(self.now if slot is None else _aware(slot))
        taken = self.store.periodic_slots.get(processo)
        if taken is not None and due <= taken:
            return None
        self.store.periodic_slots[processo] = due
        row = slot_task_row(schedule, due, self.settings.queue_name)
        return self.store.insert_task(self.connection(), row)

    @staticmethod
    def _schedule(worker: WorkerBase, processo: str) -> PeriodicSchedule:
        schedules = {s.processo: s for s in worker.periodic_schedules()}
        if processo not in schedules:
            raise ValueError(
                f"{type(worker).__name__} has no periodic processo {processo!r} "
                f"(periodic: {sorted(schedules) or 'none'})"
            )
        return schedules[processo]

    # -- the clock --

    @property
    def now(self) -> datetime.datetime:
        return self.store.now

    def advance(self, seconds: float) -> None:
        self.store.now += datetime.timedelta(seconds=seconds)

    # -- running --

    def run(
        self,
        worker: WorkerBase,
        bd_conn: Any = None,
        *,
        advance_time: bool = True,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> int:
        """Run ready tasks with ``worker`` until none is left; the number of attempts run.

        With ``advance_time`` (the default) the clock jumps to each scheduled
        retry, so retries and dead letters run too; without it, only what is
        due now runs. ``bd_conn``: what handlers receive (default: a
        ``MemoryConnection``, on which a ``QueueClient`` enqueues here).
        """
        policies = worker.retry_policies(self.settings, self.rng)
        handled = (worker.handled_subscribers(), worker.handled_processos())
        attempts = 0
        while True:
            row = self._next_ready(handled)
            if row is None:
                due = self._next_due(handled) if advance_time else None
                if due is None:
                    return attempts
                self.store.now = max(self.now, due)
                continue
            if attempts >= max_attempts:
                raise RuntimeError(
                    f"InMemoryQueue.run: more than {max_attempts} attempts; "
                    "does a handler enqueue tasks forever?"
                )
            self._run_one(worker, row, policies, bd_conn)
            attempts += 1

    def _ready(self, handled: Handled) -> list[Row]:
        """Waiting rows the worker claims: as the real claim, not the deliveries of
        subscribers it does not handle, nor tasks of processos it has no handler for (they
        stay 'pendente')."""
        waiting = (model.PENDENTE, model.AGENDADA)
        subscribers, processos = handled
        return [
            r
            for r in self.store.rows.values()
            if r["status"] in waiting
            and (
                r["subscriber_id"] is None
                or subscribers is None
                or r["subscriber_id"] in subscribers
            )
            and (processos is None or r["processo"] in processos)
        ]

    def _next_ready(self, handled: Handled) -> Row | None:
        ready = [r for r in self._ready(handled) if r["data_hora"] <= self.now]
        if not ready:
            return None
        return min(ready, key=lambda r: (-r["prioridade"], r["data_hora"], r["id"]))

    def _next_due(self, handled: Handled) -> datetime.datetime | None:
        return min((r["data_hora"] for r in self._ready(handled)), default=None)

    def _run_one(self, worker: WorkerBase, row: Row, policies: RetryPolicies, bd_conn: Any) -> None:
        row["status"] = model.PROCESSANDO
        task = TaskRecord.from_row(self.store.resolved(row))
        staged: list[Row] = []
        conn = bd_conn if bd_conn is not None else MemoryConnection(self.store, staged)
        context = TaskContext(task.id, task.row.get("id_inicial"))
        context.bd_conn, context.queue_table = conn, self.store.queue_table
        context.commits = MemoryCommits(self.store.steps, staged)
        self._running[task.id] = context
        try:
            if task.row["pub_sub"] and task.row["publication_id"] is None and not task.dead:
                # As WorkerBase.publish, on this store (the fan-out reads and inserts only).
                result: str | None = publish(cast("QueueStore", self.store), conn, task.row)
            else:
                with running(context):  # current_task(), pipelines' checkpoints
                    result = worker.handle_task(task.row, conn)
                    if inspect.iscoroutine(result):  # an async def handler, awaited here
                        result = asyncio.run(result)
        except BaseException as exc:  # noqa: BLE001 - as the executor: any error fails the task
            _keep_progress(row, context)
            if context.suspension is not None:
                return  # a durable wait: 'pendente' again, what it staged kept (steps.py)
            # As every drain (runtime/failures.py): 'cancelada', not retried, when it stopped
            # on a cancel request (or raised TaskCancelled itself), or failed in any way after
            # one; else a failure as the task's retry policy says.
            settle_failure(cast("WorkerStore", self.store), None, policies, task, exc)
            return
        finally:
            self._running.pop(task.id, None)
        _keep_progress(row, context)
        if context.suspension is not None:  # the handler caught TaskSuspended
            return
        self.store.keep(staged)
        message = DEFAULT_SUCCESS_MESSAGE if result is None else str(result)
        row.update(status=model.SUCESSO, mensagem=bounded(message, model.MENSAGEM_LIMIT))

    def _cancel_requested(self, attempt_id: int) -> None:
        """``QueueClient.cancel_task`` on the running attempt: its handler is asked to stop
        (``check_cancelled()`` raises, a pipeline stops at its next ``yield``)."""
        context = self._running.get(attempt_id)
        if context is not None:
            context.request_stop(CANCEL_REQUESTED)

    # -- looking --

    def tasks(self, **columns: Any) -> list[Row]:
        """Every attempt (dead letters included) whose columns equal ``columns``, by id;
        copies, later attempts with their first attempt's payload."""
        return [
            self.store.resolved(r)
            for r in sorted(self.store.rows.values(), key=lambda r: r["id"])
            if all(r.get(k) == v for k, v in columns.items())
        ]

    def task(self, task_id: int) -> Row:
        """The attempt ``task_id`` (a copy); ``KeyError`` when there is none."""
        return self.store.resolved(self.store.rows[task_id])

    def statuses(self) -> dict[str, int]:
        """{status: attempts in it}."""
        counts: dict[str, int] = {}
        for row in self.store.rows.values():
            counts[row["status"]] = counts.get(row["status"], 0) + 1
        return counts


def _aware(moment: datetime.datetime) -> datetime.datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _keep_progress(row: Row, context: TaskContext) -> None:
    """The last progress the handler reported, on its attempt's row (as the worker writes it)."""
    progress = context.progress
    if progress is not None:
        row.update(
            progress_done=progress.done,
            progress_total=progress.total,
            progress_message=progress.message,
        )
