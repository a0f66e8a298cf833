"""``@Task``: one method per ``processo``, with that processo's options.

```python
class Billing(WorkerBase):
    @Task("nota_emitida", max_retry=5, retry_backoff="exponential", retry_base_s=2)
    def on_nota(self, payload: str, tarefa: dict, bd_conn) -> str: ...

    def execute(self, payload, tarefa, bd_conn): ...  # every other processo
```

Options are checked when the decorator runs (``ValueError`` naming the
processo and the option; an unknown option is a ``TypeError``), and the
registry when the class is defined. Registries belong to the class that
declares the methods and its subclasses; a subclass's declaration of a
processo wins over its bases'. ``None`` in an option means the queue's
default (``QUEUE_MAX_RETRY``, ``QUEUE_BASE_INTERVAL_RETRY``, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.fleet.breakers import breaker_problem
from nsj_queue_lib.flow import limits
from nsj_queue_lib.flow.periodic import PeriodicSchedule, schedule_problem
from nsj_queue_lib.model import TEXT_LIMITS
from nsj_queue_lib.settings_checks import out_of_bounds

_MARK = "_nsj_task_options"
LINEAR = "linear"
EXPONENTIAL = "exponential"
BACKOFFS = (LINEAR, EXPONENTIAL)
Backoff = Literal["linear", "exponential"]

HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    """A processo's declared options; ``None``: the queue's default."""

    processo: str
    max_retry: int | None = None
    retry_backoff: Backoff | None = None  # None: "linear"
    retry_base_s: float | None = None
    retry_max_s: float | None = None
    timeout_s: float | None = None
    # Periodic tasks (flow/periodic.py): enqueued once per slot by the worker fleet.
    cron: str | None = None
    cron_tz: str | None = None  # None: UTC
    every_s: int | None = None
    cron_payload: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False)
    # Per-processo limits, cluster-wide (flow/limits.py, docs/flow-control.md).
    max_concurrent: int | None = None
    rate_limit: str | None = None
    interval_s: tuple[float, float] | None = None
    time_windows: str | tuple[str, ...] | None = None
    # Per fair_key (fleet/fair.py): tasks without one are not capped by it.
    max_concurrent_per_key: int | None = None
    # Fleet control (fleet/breakers.py): (consecutive failures, cool-down seconds).
    circuit_breaker: tuple[int, float] | None = None
    # A generator handler's yields are durable steps (workflow/steps.py).
    durable_steps: bool = False

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem is not None:
            option, why = problem
            raise ValueError(f"@Task({self.processo!r}): {option} {why}")


# option -> (integer, minimum, strictly positive)
_NUMBERS = {
    "max_retry": (True, 1, False),
    "retry_base_s": (False, None, True),
    "retry_max_s": (False, None, True),
    "timeout_s": (False, None, True),
}


def _processo_problem(processo: Any) -> str | None:
    if not isinstance(processo, str) or not processo.strip():
        return f"must be a non-empty string, got {processo!r}"
    if len(processo) > TEXT_LIMITS["processo"]:
        return f"must be at most {TEXT_LIMITS['processo']} characters"
    return None


def _problem(options: TaskOptions) -> tuple[str, str] | None:
    """The first bad option of ``options`` and what is wrong with it, or None.

    The processo itself is checked by ``Task``: the options of a processo read
    from a row (``TaskRegistry.options_for``) are built whatever its text.
    """
    for option, (integer, minimum, positive) in _NUMBERS.items():
        value = getattr(options, option)
        why = None if value is None else out_of_bounds(value, integer, minimum, None, positive)
        if why:
            return option, why
    if options.retry_backoff is not None and options.retry_backoff not in BACKOFFS:
        return (
            "retry_backoff",
            f"must be one of {', '.join(BACKOFFS)}, got {options.retry_backoff!r}",
        )
    base, cap = options.retry_base_s, options.retry_max_s
    if base is not None and cap is not None and cap < base:
        return "retry_max_s", f"must be >= retry_base_s ({base:g}), got {cap:g}"
    problem = schedule_problem(options.cron, options.cron_tz, options.every_s, options.cron_payload)
    if problem is not None:
        return problem
    why = breaker_problem(options.circuit_breaker)
    if why is not None:
        return "circuit_breaker", why
    return limits.check_declaration(
        options.processo,
        options.max_concurrent,
        options.rate_limit,
        options.interval_s,
        options.time_windows,
        options.max_concurrent_per_key,
    )


def declared_limits(options: TaskOptions) -> limits.ProcessoLimits | None:
    """The processo's limits as the limits table stores them; None when it declares none."""
    return limits.ProcessoLimits.declared(
        options.processo,
        options.max_concurrent,
        options.rate_limit,
        options.interval_s,
        options.time_windows,
        options.max_concurrent_per_key,
    )


class Task:
    """``@Task("processo", ...)``: the method handles the tasks of that ``processo``.

    The method is called as ``execute`` is: ``(self, payload, tarefa, bd_conn)``
    in the task's transaction; an ``async def`` method is awaited on the
    worker's event loop with an async ``bd_conn``. One method may carry several
    ``@Task``.

    ``cron`` (five fields, read in ``cron_tz``, default UTC) or ``every_s``
    (whole seconds from the Unix epoch) make the workers enqueue the processo
    once per slot across the cluster, with ``{"slot": ...}`` and the keys of
    ``cron_payload`` as payload (docs/periodic-tasks.md).
    """

    def __init__(
        self,
        processo: str,
        *,
        max_retry: int | None = None,
        retry_backoff: Backoff | None = None,
        retry_base_s: float | None = None,
        retry_max_s: float | None = None,
        timeout_s: float | None = None,
        cron: str | None = None,
        cron_tz: str | None = None,
        every_s: int | None = None,
        cron_payload: Mapping[str, Any] | None = None,
        max_concurrent: int | None = None,
        rate_limit: str | None = None,
        interval_s: tuple[float, float] | None = None,
        time_windows: str | Sequence[str] | None = None,
        circuit_breaker: tuple[int, float] | None = None,
        durable_steps: bool = False,
        max_concurrent_per_key: int | None = None,
    ) -> None:
        why = _processo_problem(processo)
        if not isinstance(durable_steps, bool):
            raise TypeError(f"@Task({processo!r}): durable_steps must be a bool")
        if why is not None:
            raise ValueError(f"@Task({processo!r}): processo {why}")
        self.options = TaskOptions(
            processo,
            max_retry,
            retry_backoff,
            retry_base_s,
            retry_max_s,
            timeout_s,
            cron=cron,
            cron_tz=cron_tz,
            every_s=every_s,
            # A copy: a dict changed after the class was defined changes no payload.
            cron_payload=dict(cron_payload) if isinstance(cron_payload, Mapping) else cron_payload,
            max_concurrent=max_concurrent,
            max_concurrent_per_key=max_concurrent_per_key,
            rate_limit=rate_limit,
            # Hashable (frozen options), whatever sequence was given.
            interval_s=tuple(interval_s) if isinstance(interval_s, list) else interval_s,
            time_windows=tuple(time_windows) if isinstance(time_windows, list) else time_windows,  # type: ignore[arg-type]
            circuit_breaker=(
                tuple(circuit_breaker) if isinstance(circuit_breaker, list) else circuit_breaker
            ),
            durable_steps=durable_steps,
        )

    def __call__(self, func: HandlerT) -> HandlerT:
        # ``async def`` methods run on the worker's event loop (runtime/async_executor.py);
        # generator methods are pipelines (runtime/pipeline.py).
        if not callable(func):
            raise TypeError(f"@Task({self.options.processo!r}) decorates a method")
        marks = getattr(func, _MARK, ())
        if any(m.processo == self.options.processo for m in marks):
            raise ValueError(f"@Task({self.options.processo!r}) is on {func.__qualname__} twice")
        setattr(func, _MARK, (*marks, self.options))
        return func


@dataclasses.dataclass(frozen=True)
class TaskRegistry:
    """A worker class's ``@Task`` methods: processo -> (method name, options)."""

    methods: Mapping[str, str] = dataclasses.field(default_factory=dict)
    options: Mapping[str, TaskOptions] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, klass: type) -> TaskRegistry:
        """Collected over ``klass``'s MRO: the nearest declaration of a processo wins.

        Two methods of one class declaring the same processo is an error.
        """
        methods: dict[str, str] = {}
        options: dict[str, TaskOptions] = {}
        for base in reversed(klass.__mro__):
            declared: dict[str, str] = {}
            for name, value in vars(base).items():
                for mark in getattr(value, _MARK, ()):
                    if mark.processo in declared:
                        raise ValueError(
                            f"{base.__qualname__}: processo {mark.processo!r} has two "
                            f"@Task methods, {declared[mark.processo]} and {name}"
                        )
                    declared[mark.processo] = name
                    options[mark.processo] = mark
            methods.update(declared)
        return cls(methods, options)

    def known(self) -> list[str]:
        return sorted(self.methods)

    def limits(self) -> dict[str, limits.ProcessoLimits]:
        """processo -> its declared limits, for the processos that declare some."""
        found = {p: declared_limits(o) for p, o in self.options.items()}
        return {p: lim for p, lim in found.items() if lim is not None}

    def breakers(self) -> dict[str, tuple[int, float]]:
        """processo -> (failures, cool-down seconds), for the processos with a circuit breaker."""
        return {
            p: o.circuit_breaker for p, o in self.options.items() if o.circuit_breaker is not None
        }

    def options_for(self, processo: str) -> TaskOptions:
        """The declared options of ``processo``; all defaults when none were declared."""
        found = self.options.get(processo)
        return found if found is not None else TaskOptions(processo)

    def periodic(self) -> list[PeriodicSchedule]:
        """The schedules of the processos declared with ``cron`` or ``every_s``.

        Checked again (a worker refuses options that did not come through
        ``@Task``'s checks): ``ConfigError`` naming each processo and option.
        """
        schedules, problems = [], {}
        for o in self.options.values():
            if o.cron is None and o.every_s is None:
                continue
            try:
                problem = schedule_problem(o.cron, o.cron_tz, o.every_s, o.cron_payload)
            except ImportError as exc:
                problem = ("cron", str(exc))
            if problem is None:
                schedules.append(
                    PeriodicSchedule(o.processo, o.cron, o.cron_tz, o.every_s, o.cron_payload)
                )
            else:
                problems[f"@Task({o.processo!r})"] = " ".join(problem)
        if problems:
            raise ConfigError(problems)
        return schedules


def checked_limits(registry: TaskRegistry) -> dict[str, limits.ProcessoLimits]:
    """The registry's limits, checked again where the worker starts (a time zone this
    machine lacks, options built around the decorator): ``ConfigError`` naming the
    processo and the option, so the worker refuses to start."""
    from nsj_queue_lib.exceptions import ConfigError

    problems = {}
    for processo, options in registry.options.items():
        problem = limits.check_declaration(
            processo,
            options.max_concurrent,
            options.rate_limit,
            options.interval_s,
            options.time_windows,
            options.max_concurrent_per_key,
        )
        if problem is not None:
            option, why = problem
            problems[f"@Task({processo!r}) {option}"] = why
    if problems:
        raise ConfigError(problems)
    return registry.limits()


def no_handler_message(worker_class: type, processo: Any, known: list[str]) -> str:
    names = ", ".join(repr(p) for p in known) or "none"
    return (
        f"no handler for processo {processo!r}: {worker_class.__name__} has no @Task method "
        f"for it and no execute(); processos it handles: {names}"
    )
