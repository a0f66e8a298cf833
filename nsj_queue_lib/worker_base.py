"""WorkerBase: subclass it, implement ``execute``, call ``run()`` (a pod's entry point).

``execute(payload, tarefa, bd_conn)`` runs inside a transaction on
``bd_conn``; the task's 'sucesso' commits with whatever it wrote. If it
raises, all of it is rolled back and the attempt is retried later, and after
QUEUE_MAX_RETRY attempts a dead-letter task is handled by ``execute_dead``.
Methods decorated ``@Task("processo", ...)`` (``nsj_queue_lib.task``) take the
tasks of their processo, with that processo's retry policy; ``execute`` takes
the rest. A processo with neither fails with a ``PermanentError``.
"""

from __future__ import annotations

import abc
import inspect
import logging
import os
import random
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, cast

from nsj_queue_lib.context import TaskContext, current_task
from nsj_queue_lib.dbapi import DBConnection
from nsj_queue_lib.exceptions import ConfigError, NoCurrentTaskError, PermanentError
from nsj_queue_lib.process.ids import process_id_of
from nsj_queue_lib.process.running import run_process_task
from nsj_queue_lib.retry_policy import RetryPolicies
from nsj_queue_lib.runtime.pipeline import is_pipeline, run_pipeline
from nsj_queue_lib.settings import Settings
from nsj_queue_lib.task import TaskOptions, TaskRegistry, checked_limits, no_handler_message

if TYPE_CHECKING:
    from nsj_queue_lib.db.driver import ConnectionPool, Driver
    from nsj_queue_lib.flow.periodic import PeriodicSchedule
    from nsj_queue_lib.runtime.worker_runtime import WorkerRuntime

EXIT_CONFIG_ERROR = 2
# What a handler returns: the message to store (None: the default one), or, for an
# ``async def`` handler, a coroutine that returns it (awaited on the worker's event loop).
HandlerResult = str | None | Awaitable[str | None]
logger = logging.getLogger("nsj_queue_lib.worker")


class WorkerBase(abc.ABC):  # noqa: B024 - an ABC still, so subclasses can add abstract methods
    _task_registry: ClassVar[TaskRegistry] = TaskRegistry()
    # Class-level defaults: a subclass whose __init__ does not call
    # super().__init__() (1.2.2 had no base __init__) still works.
    _settings: Settings | None = None
    _runtime: WorkerRuntime | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._task_registry = TaskRegistry.of(cls)

    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings
        self._runtime: WorkerRuntime | None = None

    # -- to implement --

    def execute(self, payload: str, tarefa: dict[str, Any], bd_conn: DBConnection) -> HandlerResult:
        """Do the task's work on ``bd_conn`` (do not commit); return the message to store.

        Called for every processo without a ``@Task`` method. Not overridden:
        such a task fails permanently (its dead letter follows at once).
        """
        raise PermanentError(
            no_handler_message(type(self), tarefa.get("processo"), self._task_registry.known())
        )

    def execute_dead(
        self, payload: str, tarefa: dict[str, Any], bd_conn: DBConnection
    ) -> HandlerResult:
        """Handle a dead letter: a task whose attempts ran out, or that failed permanently.
        Default: log it."""
        message = (
            f"Task {tarefa.get('live_id')} ran out of attempts without success; "
            "manual intervention is needed."
        )
        logger.warning("queue task=%s: %s", tarefa.get("id"), message)
        return message

    # -- runtime --

    @classmethod
    def retry_policies(cls, settings: Settings, rng: random.Random | None = None) -> RetryPolicies:
        """The queue's default policy (from ``settings``) and this class's ``@Task`` ones.

        Raises ``ConfigError`` for options that clash with the settings.
        """
        return RetryPolicies.build(settings, cls._task_registry.options.values(), rng)

    @classmethod
    def handled_subscribers(cls) -> frozenset[str] | None:
        """The pub/sub subscribers whose deliveries this worker claims; None: every one.

        A plain worker handles none: it leaves deliveries to the pub/sub workers
        that handle them (they stay 'pendente' meanwhile) instead of claiming and
        failing them. A subclass whose ``execute`` does handle deliveries returns
        None (docs/pubsub.md, "Which worker claims a delivery").
        """
        return frozenset()

    @classmethod
    def handled_processos(cls) -> frozenset[str] | None:
        """The processos whose tasks this worker claims; None: every one.

        A worker that overrides ``execute`` handles every processo (as 1.2.2's did).
        One that routes with ``@Task`` methods only claims their processos, and their
        dead letters: several deployments can share one queue table, each with its own
        processos, and a task no running worker handles waits 'pendente' instead of
        failing (docs/handlers.md, "Deployments that share a queue").
        """
        if cls.execute is not WorkerBase.execute:
            return None
        return frozenset(cls._task_registry.methods)

    @classmethod
    def task_options(cls, processo: str) -> TaskOptions:
        """The options ``@Task`` declared for ``processo`` (``None`` fields: the queue's
        defaults); all ``None`` for a processo without a ``@Task`` method."""
        return cls._task_registry.options_for(processo)

    @classmethod
    def task_timeouts(cls) -> dict[str, float]:
        """``@Task(timeout_s=)`` by processo; the others use ``QUEUE_TASK_TIMEOUT``."""
        return {
            processo: options.timeout_s
            for processo, options in cls._task_registry.options.items()
            if options.timeout_s is not None
        }

    @classmethod
    def periodic_schedules(cls) -> list[PeriodicSchedule]:
        """The processos this class enqueues on a schedule (``@Task(cron=)``/``every_s=``).

        Raises ``ConfigError`` naming the processo and the option.
        """
        return cls._task_registry.periodic()

    def handle_task(self, tarefa: dict[str, Any], bd_conn: DBConnection) -> Any:
        """Route a claimed task to the right method (called by the runtime).

        Dead letters go to ``execute_dead``, publications are fanned out, and
        pub/sub deliveries go to ``execute`` (``WorkerPubSubBase`` routes them
        by subscriber); the rest by processo: its ``@Task`` method, else ``execute``.
        For an ``async def`` method the result is its coroutine (the runtime awaits it).
        A generator method is a pipeline, run here step by step (runtime/pipeline.py); an
        async generator's run is a coroutine too.
        """
        if (
            process_id_of(tarefa) is not None
            and not tarefa.get("dead")
            and tarefa.get("publication_id") is None
        ):
            # A task of a process: it runs with its process (nsj_queue_lib/process/).
            return run_process_task(
                tarefa,
                _task_context(tarefa),
                lambda: self._handle(tarefa, bd_conn),
                self._runtime.store if self._runtime is not None else None,
            )
        return self._handle(tarefa, bd_conn)

    def _handle(self, tarefa: dict[str, Any], bd_conn: DBConnection) -> Any:
        method, args = self._route(tarefa)
        result = method(*args, bd_conn)
        if is_pipeline(result):
            # Its @Task method's option (not a dead letter's or a delivery's handler).
            durable = (
                not tarefa.get("dead")
                and tarefa.get("publication_id") is None
                and self.task_options(tarefa.get("processo") or "").durable_steps
            )
            return run_pipeline(
                result, _task_context(tarefa), self._timeout_for(tarefa), durable=durable
            )
        return result

    def _timeout_for(self, tarefa: dict[str, Any]) -> float | None:
        """The attempt's time limit (a pipeline checks it at each checkpoint): the task's
        own ``timeout_s``, its processo's, else QUEUE_TASK_TIMEOUT."""
        if tarefa.get("timeout_s") is not None:
            return float(tarefa["timeout_s"])
        declared = self.task_options(tarefa.get("processo") or "").timeout_s
        if declared is not None:
            return declared
        return self._settings.queue_task_timeout if self._settings is not None else None

    def handler_is_async(self, tarefa: dict[str, Any]) -> bool:
        """Whether ``handle_task`` returns a coroutine for ``tarefa`` (its method is
        ``async def``, or an async generator)."""
        return _is_async(self._route(tarefa)[0])

    @classmethod
    def has_async_handlers(cls) -> bool:
        """Whether any handler of this class is ``async def`` or an async generator (then the
        worker runs an event loop)."""
        names = {"execute", "execute_dead", *cls._task_registry.methods.values()}
        return any(_is_async(getattr(cls, name)) for name in names)

    def _route(self, tarefa: dict[str, Any]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """The method for ``tarefa`` and its arguments before ``bd_conn``."""
        if tarefa.get("dead"):
            return self.execute_dead, (_payload_text(tarefa), tarefa)
        if tarefa.get("publication_id") is not None:  # a delivery (its pub_sub is false)
            return self.execute, (_payload_text(tarefa), tarefa)
        if tarefa.get("pub_sub"):
            return self.publish, (tarefa,)
        method_name = self._task_registry.methods.get(tarefa.get("processo") or "")
        if method_name is None:
            return self.execute, (_payload_text(tarefa), tarefa)
        return getattr(self, method_name), (_payload_text(tarefa), tarefa)

    def publish(self, tarefa: dict[str, Any], bd_conn: DBConnection) -> str:
        """A pub/sub publication: fan out to the subscribers."""
        from nsj_queue_lib.pubsub import publish

        assert self._runtime is not None, "publish runs inside a running worker"
        return publish(self._runtime.store, bd_conn, tarefa)

    def stop(self) -> None:
        """Ask a running worker to stop (from another thread or a handler)."""
        if self._runtime is not None:
            self._runtime.stop()

    def run(self) -> None:
        """Build settings from the environment (unless given), run until stopped, exit the process."""
        code = self.run_until_stopped()
        if self._runtime is not None and self._runtime.running_tasks():
            # A handler that ignored the grace period still runs; its task was
            # released already. Executor threads cannot be killed: end the process.
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        sys.exit(code)

    def make_runtime(self, settings: Settings, pool: ConnectionPool | None = None) -> WorkerRuntime:
        """The runtime that runs this worker (``pool``: one shared with other queues).

        Raises ``ConfigError``.
        """
        from nsj_queue_lib.runtime.worker_runtime import WorkerRuntime

        self._settings = settings
        asynchronous = self.handler_is_async if self.has_async_handlers() else None
        registry = self._task_registry
        self._runtime = WorkerRuntime(
            settings,
            self.handle_task,
            driver=self.runtime_driver(settings),
            policies=self.retry_policies(settings),
            task_timeouts=self.task_timeouts(),
            async_route=asynchronous,
            pool=pool,
            periodic=self.periodic_schedules(),
            handled_subscribers=self.handled_subscribers(),
            handled_processos=self.handled_processos(),
            limits=checked_limits(registry),
            handled=frozenset(registry.methods),
            breakers=registry.breakers(),
        )
        return self._runtime

    def runtime_driver(self, settings: Settings) -> Driver | None:
        """The database driver of this worker's runtime; None (the default): the one
        ``settings.db_driver`` names. A subclass returns its own driver to shape the
        connections its handlers get (``nsj_queue_lib.contrib.django`` does)."""
        return None

    def run_until_stopped(self, install_signal_handlers: bool = True) -> int:
        """Run the worker; returns the exit code instead of exiting (for code and tests)."""
        from nsj_queue_lib.log import configure_logging

        if self._settings is None:
            try:
                self._settings = Settings.from_env(os.environ)
            except ConfigError as exc:
                for name, why in exc.problems.items():
                    print(f"nsj_queue_lib: configuration error: {name} {why}", file=sys.stderr)
                print(
                    f"nsj_queue_lib: invalid configuration: {', '.join(exc.problems)}",
                    file=sys.stderr,
                )
                return EXIT_CONFIG_ERROR
        configure_logging(self._settings)
        try:
            self._runtime = self.make_runtime(self._settings)
        except ConfigError as exc:
            for name, why in exc.problems.items():
                print(f"nsj_queue_lib: configuration error: {name} {why}", file=sys.stderr)
            return EXIT_CONFIG_ERROR
        runtime = self._runtime
        code = runtime.run(install_signal_handlers=install_signal_handlers)
        if runtime.exit_message:
            print(f"nsj_queue_lib: {runtime.exit_message}", file=sys.stderr)
        return code


def _is_async(method: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method)


def _task_context(tarefa: dict[str, Any]) -> TaskContext:
    """The running task's context; a context of its own when ``handle_task`` is called
    outside a worker (a test calling it directly)."""
    try:
        return current_task()
    except NoCurrentTaskError:
        return TaskContext(tarefa.get("id") or 0, tarefa.get("id_inicial"))


def _payload_text(tarefa: dict[str, Any]) -> str:
    # The client always stores text; only a row written by hand can hold NULL,
    # and handlers have always received it as it is.
    return cast(str, tarefa.get("payload"))
