"""THE place that lists and supervises a worker's threads around one stop event.

Threads: the dispatcher (knows when there is work: LISTEN, polling or the
socket server, and wakes the executor), the executor's slots (threads, or one
event loop, each claiming and running its own tasks: ``executor.py``), the
lifecycle thread, and the retry, renotify and purge services. None starts
before the queue is bound: its table and claim routine checked, once, on the
first connection that succeeds; only then are the executor, the lifecycle
thread and the services built (``worker_parts.py``), from what the bind found.
Stopping (signal, HALT, ``stop()``): no new claims; in-flight tasks get
QUEUE_GRACE_PERIOD seconds; any still running are released for a new attempt;
exit code 0. A thread that dies of an unexpected error stops the worker with
a non-zero exit code and a log line naming it, rather than leaving the worker
running without it.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nsj_queue_lib.db.driver import ConnectionPool, Driver, close_quietly, make_driver
from nsj_queue_lib.db.limits_store import LimitsStore
from nsj_queue_lib.exceptions import (
    ClaimRoutineError,
    ConfigError,
    DatabaseAccessError,
    QueueTableMissingError,
)
from nsj_queue_lib.fleet.breaker_recorder import BreakerRecorder
from nsj_queue_lib.flow.limits import ProcessoLimits
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.observability.assembly import attempt_tracer, joined, observed
from nsj_queue_lib.observability.endpoint_server import EndpointServerError
from nsj_queue_lib.retry_policy import RetryPolicies
from nsj_queue_lib.runtime import server_clients
from nsj_queue_lib.runtime.assembly import AsyncRoute, ExecutorInputs
from nsj_queue_lib.runtime.attempt import TaskHandler
from nsj_queue_lib.runtime.dispatcher import BACKOFF_MAX_SECONDS, BACKOFF_START_SECONDS, Dispatcher
from nsj_queue_lib.runtime.executor import TaskExecutor
from nsj_queue_lib.runtime.lifecycle import LifecycleThread
from nsj_queue_lib.runtime.limited import Limiter
from nsj_queue_lib.runtime.liveness import LegacyKeys
from nsj_queue_lib.runtime.progress import ProgressWriter
from nsj_queue_lib.runtime.registry import WorkerRegistry
from nsj_queue_lib.runtime.running import RunningTask
from nsj_queue_lib.runtime.service import PeriodicService
from nsj_queue_lib.runtime.signals import SignalStop
from nsj_queue_lib.runtime.timeouts import TaskTimeouts
from nsj_queue_lib.runtime.worker_parts import WorkerParts
from nsj_queue_lib.settings import Settings

ProcessoLimits_Map = Mapping[str, ProcessoLimits]

if TYPE_CHECKING:
    from nsj_queue_lib.client.lock_client import LockClient
    from nsj_queue_lib.flow.periodic import PeriodicSchedule
    from nsj_queue_lib.observability.endpoints import Endpoints
    from nsj_queue_lib.workflow.server_ends import EndAnnouncer

logger = get_logger("runtime")

EXIT_OK = 0
EXIT_CONFIG_ERROR = 2
EXIT_THREAD_DIED = 3
SUPERVISE_INTERVAL_SECONDS = 0.5
ACTIVITY_INTERVAL_SECONDS = 60.0  # one INFO line per interval while the worker is busy
# Errors at start that waiting would never cure: the worker exits with EXIT_CONFIG_ERROR.
_START_REFUSALS = (QueueTableMissingError, ClaimRoutineError, DatabaseAccessError, ConfigError)


def spare_connections(settings: Settings) -> int:
    """Pool connections opened on demand beyond the executors' own: one records failures,
    one writes progress and polls cancel requests, and each abandoned handler (timeouts.py)
    may hold one until it returns."""
    return settings.queue_concurrency + 2


def _check_settings(settings: Settings, driver: Driver) -> None:
    """ConfigError naming every setting the worker cannot run with."""
    problems = {
        variable: "is required"
        for variable, value in (
            ("QUEUE_NAME", settings.queue_name),
            ("QUEUE_TABLE", settings.queue_table),
        )
        if not value
    }
    problems.update(driver.check_settings())
    if problems:
        raise ConfigError(problems)


def _endpoints(settings: Settings, stop: threading.Event) -> Endpoints | None:
    """The metrics and health endpoints, when QUEUE_METRICS_PORT is set."""
    if settings.queue_metrics_port is None:
        return None
    from nsj_queue_lib.observability.endpoints import Endpoints

    return Endpoints(settings, stop)  # ConfigError: no client


class _Supervised(threading.Thread):
    """A daemon thread whose unexpected end is recorded for the supervisor."""

    def __init__(self, name: str, target: Callable[[], None]):
        super().__init__(name=name, daemon=True)
        self._work = target
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # reported by the supervisor
            self.error = exc
            logger.exception("thread %s died", self.name)


class WorkerRuntime:
    def __init__(
        self,
        settings: Settings,
        handler: TaskHandler,
        driver: Driver | None = None,
        policies: RetryPolicies | None = None,
        task_timeouts: Mapping[str, float] | None = None,
        async_route: AsyncRoute | None = None,
        pool: ConnectionPool | None = None,
        periodic: Sequence[PeriodicSchedule] = (),
        handled_subscribers: frozenset[str] | None = None,
        limits: ProcessoLimits_Map | None = None,
        handled: frozenset[str] = frozenset(),
        handled_processos: frozenset[str] | None = None,
        breakers: Mapping[str, tuple[int, float]] | None = None,
    ):
        """``async_route``: which tasks' handlers are coroutines (then an event loop runs
        them, ``async_slots.py``); ``pool``: a pool shared with other workers of this
        process (``WorkerGroup``), opened and closed by its owner; ``periodic``: the
        processos this worker enqueues on a schedule (``@Task(cron=)``);
        ``handled_subscribers``: the pub/sub subscribers whose deliveries the claims take
        (None: all of them); ``limits``: the per-processo limits the worker class
        declares, ``handled`` the processos it routes with ``@Task`` (runtime/limited.py).

        Nothing here reaches the database: the executor, the lifecycle thread and the
        services are built once the queue is bound (``_bind``)."""
        self.driver = driver or make_driver(settings)
        _check_settings(settings, self.driver)
        self.settings = settings
        self.stop_event = threading.Event()
        self.endpoints = _endpoints(settings, self.stop_event)
        self.tracer = attempt_tracer(settings)  # QUEUE_OTEL
        handler, self.observer = observed(handler, self.endpoints, self.tracer)
        # Circuit breakers (fleet/breakers.py): an observer of outcomes and a thread.
        self.breakers = self._breakers(breakers or {}, TaskTimeouts(settings, task_timeouts))
        self.store = self.driver.store()
        self.store.set_handled_subscribers(handled_subscribers)
        self.store.set_handled_processos(handled_processos)
        self._owns_pool = pool is None
        self.pool = pool if pool is not None else self._make_pool(async_route is not None)
        self.lock_client, self.ends = self._server_clients()
        self.limiter = self._limiter(limits or {}, set(handled), handled_processos is None)
        self.parts = self._parts(policies, TaskTimeouts(settings, task_timeouts))
        self.progress = ProgressWriter(self.store, self.pool, settings.queue_name)
        self._inputs = ExecutorInputs(
            *(settings, self.pool, handler, self.stop_event, self.driver),
            policies=self.parts.policies,
            observer=self.observer,
            after_handler=self.progress.flush_one,
            async_route=async_route,
        )
        self.dispatcher = self._dispatcher()
        self.periodic = self.parts.periodic(periodic)
        self.registry = self._registry(handled_processos)
        # Built once the queue is bound (_bind): they depend on what the bind finds.
        self.executor: TaskExecutor | None = None
        self.lifecycle: LifecycleThread | None = None
        self.services: list[PeriodicService] = []
        self.exit_message: str | None = None

    def _registry(self, handled_processos: frozenset[str] | None) -> WorkerRegistry:
        """This worker's row in the workers table, under the name its claims also write in
        each attempt's ``worker`` column."""
        registry = WorkerRegistry(
            *(self.settings.queue_name, self.store, self.parts.connect),
            *(handled_processos, self.stop_event),
        )
        self.store.set_worker_name(registry.worker)
        if self.breakers is not None:
            self.breakers.worker_name = registry.worker
        return registry

    def _server_clients(self) -> tuple[LockClient | None, EndAnnouncer | None]:
        """CLIENT_SERVER_MODE: the lock client, and the announcer of task ends to
        ``wait_for_task``'s waiters (workflow/server_ends.py), an observer of outcomes."""
        lock_client = server_clients.lock_client(self.settings)
        ends = server_clients.end_announcer(self.settings, lock_client, self.stop_event)
        self.observer = joined(self.observer, ends)
        return lock_client, ends

    def _parts(self, policies: RetryPolicies | None, task_timeouts: TaskTimeouts) -> WorkerParts:
        return WorkerParts(
            self.settings,
            self.driver,
            self.store,
            self.pool,
            self.stop_event,
            policies if policies is not None else RetryPolicies.build(self.settings),
            self.observer,
            self.endpoints,
            self.lock_client,
            self.limiter,
            task_timeouts,
        )

    def _make_pool(self, asynchronous: bool) -> ConnectionPool:
        s = self.settings
        size = s.async_pool_size if asynchronous else s.queue_concurrency
        return self.driver.make_pool(size, spare=spare_connections(s))

    def _limiter(
        self, limits: ProcessoLimits_Map, handled: set[str], claims_every_processo: bool
    ) -> Limiter | None:
        """Per-processo limits where the database has a limits table (not SingleStore)."""
        try:
            limits_store = LimitsStore(self.driver.name, self.settings.queue_table, self.store)
        except ValueError as exc:
            if limits:
                raise ConfigError({f"@Task({sorted(limits)[0]!r})": str(exc)}) from exc
            return None
        limiter = Limiter(
            self.settings.queue_name,
            limits_store,
            limits,
            handled,
            self.stop_event,
            claims_every_processo,
            wake_executor=self._wake,
        )
        if self.breakers is not None:  # their trials come from the limited claim
            limiter.breakers = set(self.breakers.breakers)
            self.breakers.on_change = self._breaker_changed
        return limiter

    def _breakers(
        self, breakers: Mapping[str, tuple[int, float]], timeouts: TaskTimeouts
    ) -> BreakerRecorder | None:
        """The circuit breakers' recorder, reporting with the observer; None without any.
        Where the database has no limits table (SingleStore), a ConfigError."""
        if not breakers:
            return None
        if self.driver.limits_module is None:
            raise ConfigError(
                {
                    f"@Task({sorted(breakers)[0]!r}) circuit_breaker": (
                        f"circuit breakers are not available on {self.driver.name}"
                    )
                }
            )
        connect = functools.partial(self.driver.connect, autocommit=False)
        recorder = BreakerRecorder(self.settings, breakers, connect, timeouts.timeout_for)
        self.observer = joined(self.observer, recorder)
        if self.endpoints is not None:
            self.endpoints.observer.register_breakers(recorder)
        return recorder

    def _breaker_changed(self) -> None:
        """A breaker opened or closed: the limited claim learns when its trial is due (or
        the ordinary claims take the processo again)."""
        if self.limiter is not None:
            self.limiter.activate()
        self._wake(1)

    def _dispatcher(self) -> Dispatcher:
        return Dispatcher(
            self.settings,
            self.store,
            self._wake,
            self.parts.connect,
            self.parts.listener(),
            self.driver.is_driver_error,
            self.stop_event,
            on_halt=self.stop,
            on_reconnect=self._refresh_pool,
            on_cancel=self._cancels_notified,
            on_wake=self.limiter.mark_due if self.limiter is not None else lambda: None,
            notifies=self.driver.capabilities.listen_notify,
        )

    def _build(self, legacy: LegacyKeys | None) -> None:
        """The executor and what needs it, once the bind found whether 1.2.2's workers share
        the table (``legacy``: their keys)."""
        plan = self.parts.drain_plan(self._inputs.async_route is not None, legacy)
        self.executor = self.parts.executor(plan, self._inputs, legacy)
        self.lifecycle = self.parts.lifecycle(self.executor, self.progress)
        self.services = self.parts.services(legacy, self._rescued)

    # -- what other threads call --

    def _wake(self, count: int) -> None:
        if self.executor is not None:
            self.executor.wake(count)

    def _cancels_notified(self, task_ids: list[int]) -> None:
        if self.lifecycle is not None:
            self.lifecycle.cancels.notified(task_ids)

    def _rescued(self) -> None:
        """A rescue may have freed a max_concurrent slot: look at the limited tasks now."""
        if self.limiter is not None:
            self.limiter.mark_due()
            self._wake(1)

    def running_tasks(self) -> list[RunningTask]:
        return self.executor.running_tasks() if self.executor is not None else []

    def _observe(self, threads: list[_Supervised]) -> None:
        """/healthz watches the started threads; the gauges read the executors and the open pool."""
        assert self.endpoints is not None and self.executor is not None
        executor = self.executor
        self.endpoints.supervise(threads, executor.dead_threads)
        self.endpoints.watch(
            lambda: len(executor.running_tasks()), executor.busy_threads, self.pool.get_stats
        )

    def stop(self) -> None:
        """Ask the worker to stop (thread-safe, idempotent)."""
        self.stop_event.set()
        self.dispatcher.interrupt()
        if self.limiter is not None:
            self.limiter.interrupt()
        if self.executor is not None:
            self.executor.interrupt()

    def _refresh_pool(self) -> None:
        # After an outage every idle pooled connection is dead: replace them now
        # instead of letting the next tasks find out one by one.
        try:
            self.pool.check()
        except Exception as exc:  # noqa: BLE001 - best effort: broken connections are replaced on use
            logger.info("queue=%s: pool check failed: %s", self.settings.queue_name, exc)
        if self.lock_client is not None:
            # The socket server may have restarted: take the running tasks'
            # locks again now, not when each task next talks to the server.
            from nsj_queue_lib.client.channel import ServerConnectionError

            try:
                self.lock_client.ping()
            except ServerConnectionError:
                self.lock_client.reconnect(stop=self.stop_event, max_wait=30)

    # -- start --

    def _bind(self) -> bool:
        """Check the queue on the first connection that succeeds; False when stopped first.

        Raises ``QueueTableMissingError``, ``ClaimRoutineError`` or
        ``DatabaseAccessError`` (user, password or database refused): waiting
        would never help those. Other connection errors are outages: retried
        with back-off.
        """
        if self.lock_client is not None and not self.lock_client.reconnect(stop=self.stop_event):
            return False  # stopped before the lock server answered
        backoff = BACKOFF_START_SECONDS
        while not self.stop_event.is_set():
            conn = None
            try:
                conn = self.parts.connect()
                number = self.store.bind(conn)
                if self.periodic is not None:
                    self.periodic.periodic_store.check(conn)  # ClaimRoutineError: upgrade
                logger.debug("queue=%s: bound (queue number %d)", self.settings.queue_name, number)
                legacy = self._legacy_keys(conn)
                if self.limiter is not None:
                    self.limiter.register(conn)
                self._check_wake_ups(conn)
                self.driver.check_session_state(conn)
                topology = self.driver.check_topology(conn)  # ConfigError: MariaDB Galera
                if topology:
                    logger.info("queue=%s: %s", self.settings.queue_name, topology)
                self._build(legacy)
                return True
            except Exception as exc:
                if isinstance(exc, _START_REFUSALS):
                    raise
                if not self.driver.is_driver_error(exc):
                    raise
                logger.warning(
                    "queue=%s: database unavailable at start (%s); retrying in %.1f s",
                    self.settings.queue_name,
                    str(exc).strip(),
                    backoff,
                )
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_SECONDS)
            finally:
                close_quietly(conn)
        return False

    def _legacy_keys(self, conn: Any) -> LegacyKeys | None:
        """QUEUE_COMPAT_1_2_2: tasks hold nsj-queue-lib 1.2.2's keys too (before any thread
        starts), and the retry service leaves 1.2.2's running tasks alone."""
        keys = self.driver.legacy_keys(self.store, conn)
        if keys is not None:
            logger.info(
                "queue=%s: compatible with nsj-queue-lib 1.2.2 workers (QUEUE_COMPAT_1_2_2=%s)",
                self.settings.queue_name,
                self.settings.queue_compat_1_2_2,
            )
        return keys

    def _check_wake_ups(self, conn: Any) -> None:
        try:
            warning = self.driver.check_wake_ups(conn)
        except Exception as exc:  # noqa: BLE001 - only a diagnosis: the worker starts anyway
            logger.debug("queue=%s: wake-ups not checked: %s", self.settings.queue_name, exc)
            return
        if warning:
            logger.warning("queue=%s: %s", self.settings.queue_name, warning)

    def _start_error(self, exc: BaseException) -> int:
        if isinstance(exc, QueueTableMissingError):
            self.exit_message = (
                f"QUEUE_TABLE: table {self.settings.queue_table} does not exist "
                "(create it with python -m nsj_queue_lib.db_gen)"
            )
        else:
            self.exit_message = str(exc)
        logger.error("queue=%s: %s", self.settings.queue_name, self.exit_message)
        return EXIT_CONFIG_ERROR

    # -- run --

    def run(self, install_signal_handlers: bool = True) -> int:
        """Run until stopped; returns the process exit code."""
        signals = SignalStop(self.stop)
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            signals.install()
        try:
            return self._run()
        finally:
            signals.close()

    def _run(self) -> int:
        s = self.settings
        logger.info(
            "queue=%s table=%s: worker starting (concurrency=%d, database %s)",
            s.queue_name,
            s.queue_table,
            s.queue_concurrency,
            s.masked_dsn(),
        )
        try:
            if self.endpoints is not None:
                self.endpoints.start()  # /healthz answers while the database is awaited
            if not self._bind():
                return self._shut_down([], EXIT_OK)
        except (*_START_REFUSALS, EndpointServerError) as exc:
            return self._shut_down([], self._start_error(exc))
        if self._owns_pool:
            self.pool.open(wait=False)
        threads = self._threads()
        assert self.executor is not None  # built by _bind
        self.executor.start()
        for thread in threads:
            thread.start()
        if self.endpoints is not None:
            self._observe(threads)
        code = self._supervise(threads, self.executor)
        return self._shut_down(threads, code)

    def _threads(self) -> list[_Supervised]:
        """The worker's threads but the executor's, the dispatcher first."""
        assert self.lifecycle is not None  # built by _bind
        threads = [_Supervised("nsj-dispatcher", self.dispatcher.run)]
        if self.limiter is not None:
            threads.append(_Supervised("nsj-limits", self.limiter.run_waker))
        threads += [_Supervised(f"nsj-{svc.name}", svc.run) for svc in self.services]
        if self.periodic is not None:
            threads.append(_Supervised("nsj-periodic", self.periodic.run))
        threads.append(_Supervised("nsj-lifecycle", self.lifecycle.run))
        threads.append(_Supervised("nsj-registry", self.registry.run))
        if self.endpoints is not None:
            threads.append(_Supervised("nsj-depth", self.parts.depth_sampler().run))
        if self.breakers is not None:
            threads.append(_Supervised("nsj-breakers", self.breakers.run))
        if self.ends is not None:
            threads.append(_Supervised("nsj-task-ends", self.ends.run))
        return threads

    def _activity(self, executor: TaskExecutor) -> tuple[int, int, int]:
        """(done, failed, rescued) since the start."""
        rescued = sum(getattr(svc, "rescued_total", 0) for svc in self.services)
        return (*executor.totals(), rescued)

    def _report_activity(
        self, executor: TaskExecutor, since: tuple[int, int, int]
    ) -> tuple[int, int, int]:
        """Log what happened since ``since`` unless the worker was idle; the new totals."""
        now = self._activity(executor)
        done, failed, rescued = (a - b for a, b in zip(now, since, strict=True))
        running = len(executor.running_tasks())
        if done or failed or rescued or running:
            logger.info(
                "queue=%s: last %g s: done=%d failed=%d rescued=%d running=%d",
                self.settings.queue_name,
                ACTIVITY_INTERVAL_SECONDS,
                done,
                failed,
                rescued,
                running,
            )
        return now

    def _supervise(self, threads: list[_Supervised], executor: TaskExecutor) -> int:
        """Wait for the stop; EXIT_THREAD_DIED when a thread ends while the worker runs."""
        activity = self._activity(executor)
        next_report = time.monotonic() + ACTIVITY_INTERVAL_SECONDS
        while not self.stop_event.is_set():
            if time.monotonic() >= next_report:
                activity = self._report_activity(executor, activity)
                next_report += ACTIVITY_INTERVAL_SECONDS
            dead = [t for t in threads if not t.is_alive()] + executor.dead_threads()
            if dead:
                names = ", ".join(t.name for t in dead)
                logger.error(
                    "queue=%s: thread %s ended unexpectedly; stopping the worker",
                    self.settings.queue_name,
                    names,
                )
                self.exit_message = f"thread {names} ended unexpectedly"
                return EXIT_THREAD_DIED
            stuck = executor.stuck_threads()
            if stuck > self.settings.queue_concurrency:
                self.exit_message = (
                    f"{stuck} handlers given up after their timeout still run "
                    f"(more than QUEUE_CONCURRENCY={self.settings.queue_concurrency})"
                )
                logger.error(
                    "queue=%s: %s; stopping the worker", self.settings.queue_name, self.exit_message
                )
                return EXIT_THREAD_DIED
            self.stop_event.wait(SUPERVISE_INTERVAL_SECONDS)
        return EXIT_OK

    def _shut_down(self, threads: list[_Supervised], code: int) -> int:
        s = self.settings
        self.stop()
        dispatcher, services = threads[:1], threads[1:]
        for thread in dispatcher:
            thread.join(timeout=10)
        logger.info(
            "queue=%s: stopping; waiting up to %.0f s for %d running task(s)",
            s.queue_name,
            s.queue_grace_period,
            len(self.running_tasks()),
        )
        if self.executor is not None:
            if not self.executor.wait_idle(s.queue_grace_period):
                self._release_running(self.executor)
            self.executor.join(timeout=1)
        if self.breakers is not None:  # every attempt ended: what they queued is written
            self.breakers.finish()
        for thread in services:
            thread.join(timeout=5)
        if self._owns_pool:
            try:
                self.pool.close(timeout=5)
            except Exception:  # noqa: BLE001 - exiting anyway: the server drops our sessions
                pass
        if self.lock_client is not None:
            self.lock_client.close()
        if self.tracer is not None:
            self.tracer.close()
        if self.endpoints is not None:
            self.endpoints.close()
        logger.info("queue=%s: worker stopped (exit code %d)", s.queue_name, code)
        return code

    def _release_running(self, executor: TaskExecutor) -> None:
        name = self.settings.queue_name
        try:
            released = executor.release_running(self.parts.connect)
            logger.warning(
                "queue=%s: released %d task(s) still running after the grace period",
                name,
                released,
            )
        except Exception as exc:  # noqa: BLE001 - best effort: the retry service rescues the tasks
            logger.warning(
                "queue=%s: could not release running tasks (%s); the retry service will "
                "rescue them",
                name,
                exc,
            )
