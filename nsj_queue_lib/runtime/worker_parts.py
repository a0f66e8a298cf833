"""The parts of a worker around its executor, built from what it knows at each step.

``WorkerParts`` is made before the worker reaches the database (store, pool,
socket-server client, limiter, metrics); ``drain_plan`` and ``executor``
once the queue is bound, with nsj-queue-lib 1.2.2's keys when the bind found
its workers on the table (QUEUE_COMPAT_1_2_2); then the lifecycle thread and
the services, given the executor and those keys in their constructors.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from nsj_queue_lib.db.driver import ConnectionPool, Driver, Listener
from nsj_queue_lib.db.task_session import ClaimPhases
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.observability.measured import MeasuredLiveness
from nsj_queue_lib.observability.observer import Observer
from nsj_queue_lib.retry_policy import RetryPolicies
from nsj_queue_lib.runtime.assembly import ExecutorInputs, build_executor
from nsj_queue_lib.runtime.cancel_watch import CancelWatcher
from nsj_queue_lib.runtime.executor import TaskExecutor
from nsj_queue_lib.runtime.lifecycle import LifecycleThread
from nsj_queue_lib.runtime.limited import LimitedLiveness, Limiter
from nsj_queue_lib.runtime.liveness import (
    CompatLiveness,
    DatabaseLiveness,
    LegacyKeys,
    Liveness,
    ServerLiveness,
    task_lock_name,
)
from nsj_queue_lib.runtime.periodic_service import PeriodicEnqueuer
from nsj_queue_lib.runtime.plan import DrainPlan, plan_drain
from nsj_queue_lib.runtime.progress import ProgressWriter
from nsj_queue_lib.runtime.purge import PurgeService
from nsj_queue_lib.runtime.renotify import RenotifyService
from nsj_queue_lib.runtime.retry import RetryService
from nsj_queue_lib.runtime.schedule import make_schedule
from nsj_queue_lib.runtime.service import (
    DatabaseServiceLock,
    PeriodicService,
    ServerServiceLock,
    ServiceLock,
    service_lock_key,
)
from nsj_queue_lib.runtime.tally import TallyService
from nsj_queue_lib.runtime.timeouts import TaskTimeouts, TimeoutEnforcer
from nsj_queue_lib.runtime.vacuum import VacuumService
from nsj_queue_lib.settings import Settings

if TYPE_CHECKING:
    from nsj_queue_lib.client.lock_client import LockClient
    from nsj_queue_lib.db.queue_store import LockingQueueStore
    from nsj_queue_lib.flow.periodic import PeriodicSchedule
    from nsj_queue_lib.model import TaskRecord
    from nsj_queue_lib.observability.depth import DepthSampler
    from nsj_queue_lib.observability.endpoints import Endpoints

logger = get_logger("runtime")


@dataclasses.dataclass
class WorkerParts:
    settings: Settings
    driver: Driver
    store: Any  # the driver's queue store (a LockingQueueStore outside CLIENT_SERVER_MODE)
    pool: ConnectionPool
    stop: threading.Event
    policies: RetryPolicies
    observer: Observer
    endpoints: Endpoints | None
    lock_client: LockClient | None
    limiter: Limiter | None
    task_timeouts: TaskTimeouts

    def connect(self) -> Any:
        return self.driver.connect(autocommit=True)

    def connect_in_transaction(self) -> Any:
        return self.driver.connect(autocommit=False)

    # -- the executor --

    def drain_plan(self, asynchronous: bool, legacy: LegacyKeys | None) -> DrainPlan:
        plan = plan_drain(
            self.settings,
            group_commit_by_default=self.driver.capabilities.group_commit_by_default,
            group_statements=self.driver.task_session_class().groups,
            asynchronous=asynchronous,
            locks_in_database=self.lock_client is None and legacy is None,
        )
        if plan.ignored_batch_size is not None:
            logger.warning(
                "queue=%s: QUEUE_BATCH_SIZE=%s ignored: group commit needs synchronous "
                "handlers on PostgreSQL or MySQL/MariaDB with the liveness locks in the "
                "database (not CLIENT_SERVER_MODE nor QUEUE_COMPAT_1_2_2); one commit per task",
                self.settings.queue_name,
                plan.ignored_batch_size,
            )
        return plan

    def executor(
        self, plan: DrainPlan, inputs: ExecutorInputs, legacy: LegacyKeys | None
    ) -> TaskExecutor:
        limited = self._limited(self._base_liveness(legacy), legacy)
        # Claims are timed where an observer uses the times (metrics, claim spans). (The
        # 1.2.2-compatible liveness is not measured.)
        measure = self.observer.measures_round_trips and legacy is None
        liveness = MeasuredLiveness(limited, self.observer) if measure else limited
        return build_executor(
            plan,
            inputs,
            self._session(plan, liveness, legacy),
            liveness,
            limited=limited if isinstance(limited, LimitedLiveness) else None,
            measured=self.observer if measure else None,
        )

    def _session(self, plan: DrainPlan, liveness: Liveness, legacy: LegacyKeys | None) -> Any:
        """The task session: one whose groups hold their tasks unwritten where QUEUE_ONE_WRITE
        asks for it and the drain can (group commit, the liveness locks in the database)."""
        if self.settings.queue_one_write:
            held = None
            # A timeout ends its group's session, which would free the held tasks uncounted.
            timed = sorted(self.task_timeouts.per_processo)
            if plan.group_commit and legacy is None and self.lock_client is None and not timed:
                held = self.driver.held_session(self.store, liveness)
            if held is not None:
                return held
            logger.warning(
                "queue=%s: QUEUE_ONE_WRITE ignored: it needs group commit on PostgreSQL "
                "(QUEUE_BATCH_SIZE above 1, synchronous handlers), no 1.2.2 workers and no "
                "@Task(timeout_s=) (here: %s)",
                self.settings.queue_name,
                ", ".join(timed) or "none",
            )
        return self.driver.session(self.store, liveness)

    def _base_liveness(self, legacy: LegacyKeys | None) -> Liveness:
        if self.lock_client is not None:
            return ServerLiveness(ClaimPhases(self.store), self.lock_client, self.stop)
        if legacy is not None:
            return CompatLiveness(legacy)
        return DatabaseLiveness(self._locking_store())

    def _limited(self, liveness: Liveness, legacy: LegacyKeys | None) -> Liveness:
        """``liveness`` with the limited claim first (runtime/limited.py); ``legacy``: the
        1.2.2 keys a limited task holds too (QUEUE_COMPAT_1_2_2)."""
        if self.limiter is None:
            return liveness
        if self.lock_client is not None:
            lock, unlock = self._server_task_lock(self.lock_client)
            return LimitedLiveness(
                liveness, self.limiter, ClaimPhases(self.store), lock, unlock, take_lock=False
            )
        locking = self._locking_store()

        def unlock_task(conn: Any, task: TaskRecord) -> None:
            locking.unlock_task(conn, task.id)

        if legacy is None:
            # The limited claim takes the database liveness lock and commits itself.
            return LimitedLiveness(
                liveness, self.limiter, ClaimPhases(self.store), None, unlock_task
            )

        def hold_legacy_key(conn: Any, task: TaskRecord) -> bool:
            # Before the claim commits, as for any task (db/postgres/legacy_keys.py).
            return task.id in legacy.hold(conn, [task.id])

        return LimitedLiveness(
            liveness, self.limiter, ClaimPhases(self.store), hold_legacy_key, unlock_task
        )

    def _server_task_lock(
        self, lock_client: LockClient
    ) -> tuple[Callable[[Any, TaskRecord], bool], Callable[[Any, TaskRecord], None]]:
        queue = self.store

        def lock(conn: Any, task: TaskRecord) -> bool:
            if not lock_client.try_lock(task_lock_name(queue.queue_number, task.id)):
                raise RuntimeError(f"task {task.id}: its liveness lock is held by another client")
            return True

        def unlock(conn: Any, task: TaskRecord) -> None:
            lock_client.unlock(task_lock_name(queue.queue_number, task.id))

        return lock, unlock

    def _locking_store(self) -> LockingQueueStore:
        # check_settings() guarantees session locks outside CLIENT_SERVER_MODE.
        store: LockingQueueStore = self.store
        return store

    # -- around the executor --

    def lifecycle(self, executor: TaskExecutor, progress: ProgressWriter) -> LifecycleThread:
        s = self.settings
        cancels = CancelWatcher(
            self.store,
            self.pool,
            executor,
            s.queue_name,
            # By LISTEN, or pushed by the socket server (on every database).
            notified=self.driver.capabilities.listen_notify or s.client_server_mode,
        )
        timeouts = TimeoutEnforcer(
            s, executor, self.connect, self.driver.terminate_session, self.task_timeouts
        )
        return LifecycleThread(executor, progress, cancels, timeouts, self.stop)

    def listener(self) -> Listener:
        listener = self.driver.listener()
        if self.endpoints is None:
            return listener
        mode = self.driver.wakeup_mode()
        state = getattr(listener, "state", None)  # a checked LISTEN may have fallen back to polls
        self.endpoints.report_wakeups(state if callable(state) else lambda: {"mode": mode})
        # Where wake-ups are polls, none of them is a notification.
        return self.endpoints.listener(listener, mode != "poll")

    def service_lock(self, service: str) -> ServiceLock:
        if self.lock_client is not None:
            return ServerServiceLock(self.store, self.lock_client, service, self.stop)
        key = service_lock_key(self.settings.queue_table, service)
        return DatabaseServiceLock(self._locking_store(), key, self.connect_in_transaction)

    def services(
        self, legacy: LegacyKeys | None, on_rescued: Callable[[], None]
    ) -> list[PeriodicService]:
        s = self.settings

        def build(
            cls: type[PeriodicService], minutes: tuple[int, ...], interval: float | None, **kw: Any
        ) -> PeriodicService:
            service = cls(
                s,
                self.store,
                self.connect if cls.autocommit else self.connect_in_transaction,
                self.service_lock(cls.name),
                self.stop,
                make_schedule(minutes, interval),
                **kw,
            )
            service.transient = self.driver.is_transient
            return service

        retry = build(
            RetryService,
            s.queue_minute_retry_thread,
            s.queue_retry_thread_interval,
            lock_client=self.lock_client,
            policies=self.policies,
            observer=self.observer,
            legacy_keys=legacy,
            on_rescued=on_rescued,
            abandoned=self.driver.abandoned_groups(self.store),
        )
        services = [
            retry,
            build(RenotifyService, s.queue_minute_notify_thread, s.queue_notify_thread_interval),
            build(PurgeService, s.queue_minute_purge_thread, s.queue_purge_thread_interval),
        ]
        if self.driver.capabilities.table_maintenance and s.queue_vacuum_dead_rows:
            services.append(build(VacuumService, (), s.queue_vacuum_interval))
        if s.queue_tally_interval:
            services.append(build(TallyService, (), s.queue_tally_interval))
        return services

    def periodic(self, schedules: Sequence[PeriodicSchedule]) -> PeriodicEnqueuer | None:
        if not schedules:
            return None
        from nsj_queue_lib.db.periodic_store import PeriodicStore

        return PeriodicEnqueuer(
            self.settings,
            self.store,
            PeriodicStore(self.driver.name, self.settings.queue_table),
            self.connect_in_transaction,
            schedules,
            self.stop,
        )

    def depth_sampler(self) -> DepthSampler:
        assert self.endpoints is not None
        return self.endpoints.depth_sampler(
            self.driver.inspection_store(), self.connect_in_transaction, self.service_lock("depth")
        )
