"""Which observers a worker reports to: the Prometheus metrics, the OpenTelemetry spans, both.

Each is off unless its setting turns it on (QUEUE_METRICS_PORT, QUEUE_OTEL); a
worker with neither runs the handler and the claims unwrapped, as before either
existed. OpenTelemetry is imported only when tracing is on.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.observability.observer import NULL_OBSERVER, Observer
from nsj_queue_lib.settings import Settings

if TYPE_CHECKING:
    from nsj_queue_lib.observability.endpoints import Endpoints
    from nsj_queue_lib.observability.tracing import AttemptTracer

TaskHandler = Callable[[dict[str, Any], Any], Any]

MISSING_OTEL = (
    "needs the OpenTelemetry API: pip install 'nsj-queue-lib[otel]' (or set QUEUE_OTEL=false)"
)


def attempt_tracer(settings: Settings) -> AttemptTracer | None:
    """The span-per-attempt observer: QUEUE_OTEL=true (``ConfigError`` naming it without the
    OpenTelemetry API), or unset and the API installed; None when off."""
    if settings.queue_otel is False:
        return None
    if settings.queue_otel is None and importlib.util.find_spec("opentelemetry") is None:
        return None  # unset: on only where the extra is installed
    try:
        from nsj_queue_lib.observability.tracing import AttemptTracer
    except ImportError:
        if settings.queue_otel:
            raise ConfigError({"QUEUE_OTEL": MISSING_OTEL}) from None
        return None  # a namespace package without the API: as not installed
    return AttemptTracer(
        settings.queue_name,
        link_only=settings.queue_otel_link_only,
        claim_spans=settings.queue_otel_claim_spans,
    )


def observed(
    handler: TaskHandler, endpoints: Endpoints | None, tracer: AttemptTracer | None
) -> tuple[TaskHandler, Observer]:
    """The handler as the observers wrap it, and the one observer the runtime reports to."""
    observers: list[Observer] = []
    if tracer is not None:
        handler = tracer.handler(handler)  # inside: the span is current while it runs
        observers.append(tracer)
    if endpoints is not None:
        handler = endpoints.handler(handler)
        observers.append(endpoints.observer)
    if not observers:
        return handler, NULL_OBSERVER
    return handler, observers[0] if len(observers) == 1 else Observers(observers)


def joined(observer: Observer, extra: Observer | None) -> Observer:
    """``observer`` and ``extra`` as one (``observer`` alone when ``extra`` is None)."""
    if extra is None:
        return observer
    return extra if observer is NULL_OBSERVER else Observers([observer, extra])


class Observers(Observer):
    """Several observers as one: each call goes to every one of them, in order."""

    def __init__(self, observers: Sequence[Observer]):
        self.observers = tuple(observers)
        self.measures_round_trips = any(o.measures_round_trips for o in self.observers)

    def task_claimed(self, task: TaskRecord) -> None:
        for observer in self.observers:
            observer.task_claimed(task)

    def claim_round_trip(self, seconds: float, claimed: bool) -> None:
        for observer in self.observers:
            observer.claim_round_trip(seconds, claimed)

    def completion_round_trip(self, seconds: float) -> None:
        for observer in self.observers:
            observer.completion_round_trip(seconds)

    def handler_ran(self, processo: str, seconds: float) -> None:
        for observer in self.observers:
            observer.handler_ran(processo, seconds)

    def task_finished(self, task: TaskRecord, outcome: str) -> None:
        for observer in self.observers:
            observer.task_finished(task, outcome)

    def attempt_failed(self, task: TaskRecord, error: BaseException) -> None:
        for observer in self.observers:
            observer.attempt_failed(task, error)

    def attempt_abandoned(self, task: TaskRecord, why: str) -> None:
        for observer in self.observers:
            observer.attempt_abandoned(task, why)

    def notified(self) -> None:
        for observer in self.observers:
            observer.notified()

    def process_task_ran(
        self, processo: str, kind: str, delay: float | None, seconds: float
    ) -> None:
        for observer in self.observers:
            observer.process_task_ran(processo, kind, delay, seconds)
