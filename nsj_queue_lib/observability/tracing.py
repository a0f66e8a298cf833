"""QUEUE_OTEL: an OpenTelemetry span per attempt, and optional claim and commit spans.

Imported only when tracing is on (it needs ``opentelemetry-api``; the ``otel``
extra). ``AttemptTracer`` is an ``Observer`` (observer.py) and wraps the
worker's handler, like the Prometheus observer (``measured.timed_handler``):

- the span starts when the handler is called, as a CONSUMER span named
  ``<processo> process``, the child of the trace context stored with the task
  (``trace_context.py``) and linked to it, as OpenTelemetry's messaging
  conventions ask of a "process" span (with QUEUE_OTEL_LINK_ONLY, linked only:
  a new trace per attempt);
- it is the current span while the handler runs (in its thread, or inside its
  coroutine for an ``async def`` handler), so the handler's own spans and the
  tasks it enqueues are its children;
- it ends when the attempt's outcome is known (``task_finished``): after the
  commit of a success, or once a failure is written, with the outcome as an
  attribute; the handler's exception is recorded, and a failed outcome sets the
  status to ERROR.

An attempt whose outcome this worker never reports (its commit group went back
to the queue, and another worker ran it again) keeps its span open until the
same attempt starts again here, or until ``MAX_OPEN`` younger ones push it out,
or the worker stops: then it ends, as ``unsettled``, at the time its handler
returned.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.observability import observer as outcomes
from nsj_queue_lib.observability.observer import Observer
from nsj_queue_lib.observability.trace_context import TraceContext, decode

TaskHandler = Callable[[dict[str, Any], Any], Any]

logger = get_logger("tracing")

INSTRUMENTATION = "nsj_queue_lib"
SYSTEM = "nsj_queue_lib"  # messaging.system
# An attempt whose outcome this worker never learnt (see the module's docstring).
UNSETTLED = "unsettled"
ABANDONED = "abandoned"
# Outcomes that are no failure of the attempt: its span keeps the status UNSET.
NOT_FAILED = frozenset({outcomes.SUCESSO, outcomes.CANCELADA})
# Open attempt spans kept at most (those of attempts whose outcome never came).
MAX_OPEN = 10_000
# The global tracer providers of an application that configured no SDK.
_NO_SDK = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
# How long "no SDK configured" is believed before the global provider is asked again. An
# application that sets its provider while the worker runs gets spans within this. Asked at
# every attempt, the API read the environment each time (OTEL_PYTHON_TRACER_PROVIDER): a
# twelfth of a no-op task's worker CPU, paired (docs/benchmarks.md).
NO_SDK_RECHECK_SECONDS = 0.5


class _Open:
    """An attempt's span while its outcome is awaited."""

    __slots__ = ("error", "handler_end", "span")

    def __init__(self, span: Span):
        self.span = span
        self.error: BaseException | None = None  # the exception recorded on the span
        self.handler_end: int | None = None  # when the handler returned or raised (ns)


class AttemptTracer(Observer):
    def __init__(
        self,
        queue_name: str,
        *,
        link_only: bool = False,
        claim_spans: bool = False,
        tracer: trace.Tracer | None = None,
    ):
        self.queue_name = queue_name
        self.link_only = link_only
        self.claim_spans = claim_spans
        self.measures_round_trips = claim_spans  # claims timed only for their spans
        # The global tracer (the application's provider, once it sets one), unless given.
        self.follows_global = tracer is None
        self.tracer = tracer or trace.get_tracer(INSTRUMENTATION)
        self._lock = threading.Lock()
        self._open: dict[int, _Open] = {}
        # The global provider: an SDK's, once seen (the API sets it once, for good), or
        # none until this monotonic time.
        self._sdk_seen = False
        self._no_sdk_until = 0.0

    def _untraced(self) -> bool:
        """Whether attempts run without spans: following the global provider while the
        application has configured no SDK (every span would be the no-op one, and the
        handler would see no context to propagate either)."""
        if not self.follows_global or self._sdk_seen:
            return False
        now = time.monotonic()
        if now < self._no_sdk_until:
            return True
        if isinstance(trace.get_tracer_provider(), _NO_SDK):
            self._no_sdk_until = now + NO_SDK_RECHECK_SECONDS
            return True
        self._sdk_seen = True
        return False

    # -- the handler --

    def handler(self, inner: TaskHandler) -> TaskHandler:
        """``inner``, run inside its attempt's span (the span ends with the outcome)."""

        def run(row: dict[str, Any], conn: Any) -> Any:
            if self._untraced():
                return inner(row, conn)
            try:
                entry = self._begin(row)
            except Exception:  # tracing must never fail a task: it runs untraced (logged)
                logger.warning("queue=%s: no span for this attempt", self.queue_name, exc_info=True)
                return inner(row, conn)
            token = otel_context.attach(trace.set_span_in_context(entry.span))
            try:
                result = inner(row, conn)
            except BaseException as exc:
                self._raised(entry, exc)
                raise
            finally:
                otel_context.detach(token)
            if inspect.iscoroutine(result):
                return self._current_in(entry, result)
            entry.handler_end = time.time_ns()
            return result

        return run

    async def _current_in(self, entry: _Open, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Await an ``async def`` handler's coroutine with its span current inside it."""
        token = otel_context.attach(trace.set_span_in_context(entry.span))
        try:
            return await coroutine
        except BaseException as exc:
            self._raised(entry, exc)
            raise
        finally:
            otel_context.detach(token)
            entry.handler_end = time.time_ns()

    def _begin(self, row: dict[str, Any]) -> _Open:
        task_id = int(row["id"])
        first_id = int(row.get("id_inicial") or task_id)
        processo = str(row.get("processo") or "")
        stored = decode(row.get("trace_context"))
        producer = None if stored is None else _span_context(stored)
        links = [] if producer is None else [Link(producer)]
        if producer is None or self.link_only:
            parent = otel_context.Context()  # a root: never whatever happens to be current
        else:
            parent = trace.set_span_in_context(NonRecordingSpan(producer))
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": self.queue_name,
            "messaging.message.id": str(first_id),
            "nsjq.queue": self.queue_name,
            "nsjq.processo": processo,
            "nsjq.task.id": task_id,
            "nsjq.task.first_id": first_id,
            "nsjq.task.attempt": int(row.get("tentativa") or 1),
        }
        if row.get("dead"):
            attributes["nsjq.task.dead"] = True
        if row.get("subscriber_id") is not None:
            attributes["messaging.destination.subscription.name"] = str(row["subscriber_id"])
        span = self.tracer.start_span(
            f"{processo} process",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        )
        entry = _Open(span)
        with self._lock:
            # The same attempt again (its group went back to the queue, and this worker
            # claimed it again): the earlier span ends here.
            earlier = self._open.pop(task_id, None)
            self._open[task_id] = entry
            pushed_out = _oldest(self._open) if len(self._open) > MAX_OPEN else None
        for stale in (earlier, pushed_out):
            if stale is not None:
                _end(stale, UNSETTLED, stale.handler_end)
        return entry

    def _raised(self, entry: _Open, exc: BaseException) -> None:
        entry.handler_end = time.time_ns()
        _record(entry, exc)

    # -- Observer: the outcome --

    def attempt_failed(self, task: TaskRecord, error: BaseException) -> None:
        with self._lock:
            entry = self._open.get(task.id)
        if entry is not None and error is not entry.error:
            _record(entry, error)  # a commit's failure, a timeout: not the handler's own

    def task_finished(self, task: TaskRecord, outcome: str) -> None:
        if not self._open:  # no span open (untraced): none of this task's either
            return
        with self._lock:
            entry = self._open.pop(task.id, None)
        if entry is not None:
            _end(entry, outcome)

    def attempt_abandoned(self, task: TaskRecord, why: str) -> None:
        with self._lock:
            entry = self._open.pop(task.id, None)
        if entry is not None:
            _end(entry, ABANDONED, description=why)

    def close(self) -> None:
        """The worker stops: the spans still open end (their outcomes will not come)."""
        with self._lock:
            entries, self._open = list(self._open.values()), {}
        for entry in entries:
            _end(entry, UNSETTLED, entry.handler_end)

    # -- Observer: claims and group commits (QUEUE_OTEL_CLAIM_SPANS) --

    def claim_round_trip(self, seconds: float, claimed: bool) -> None:
        if self.claim_spans:
            self._round_trip("claim", "receive", seconds, {"nsjq.claimed": claimed})

    def completion_round_trip(self, seconds: float) -> None:
        if self.claim_spans:
            self._round_trip("commit", "settle", seconds, {})

    def _round_trip(
        self, operation: str, operation_type: str, seconds: float, more: dict[str, Any]
    ) -> None:
        """A span for a round trip measured after the fact (MeasuredLiveness, GroupClaims)."""
        end = time.time_ns()
        span = self.tracer.start_span(
            f"{self.queue_name} {operation}",
            context=otel_context.Context(),
            kind=SpanKind.CLIENT,
            start_time=end - int(seconds * 1e9),
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": operation_type,
                "messaging.operation.name": operation,
                "messaging.destination.name": self.queue_name,
                "nsjq.queue": self.queue_name,
                **more,
            },
        )
        span.end(end_time=end)


def _span_context(stored: TraceContext) -> SpanContext:
    return SpanContext(
        stored.trace_id,
        stored.span_id,
        is_remote=True,
        trace_flags=TraceFlags(stored.flags),
        trace_state=TraceState(stored.tracestate_pairs()),
    )


def _oldest(entries: dict[int, _Open]) -> _Open:
    """Remove and return the oldest entry (dicts keep their insertion order)."""
    return entries.pop(next(iter(entries)))


def error_type(error: BaseException) -> str:
    """``error.type``: the exception's class name, module-qualified unless a built-in."""
    cls = type(error)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _record(entry: _Open, error: BaseException) -> None:
    entry.error = error
    entry.span.record_exception(error)


def _end(
    entry: _Open, outcome: str, end_time: int | None = None, description: str | None = None
) -> None:
    span = entry.span
    span.set_attribute("nsjq.outcome", outcome)
    if outcome not in NOT_FAILED:
        error = entry.error
        span.set_attribute("error.type", error_type(error) if error is not None else outcome)
        why = description or (f"{type(error).__name__}: {error}" if error is not None else outcome)
        span.set_status(Status(StatusCode.ERROR, why[:500]))
    span.end(end_time=end_time)
