"""The Prometheus observer: every metric of a worker, on a registry of its own.

Imported only when QUEUE_METRICS_PORT is set (it needs ``prometheus_client``,
the ``metrics`` extra). Every metric carries the ``queue`` label (QUEUE_NAME);
docs/metrics.md lists them. Gauges of the worker's state are read when
scraped; the queue depth is the sample of ``depth.DepthSampler``, published
only by the worker that sampled it.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.observability.depth import DepthSnapshot
from nsj_queue_lib.observability.measured import seconds_waited
from nsj_queue_lib.observability.observer import Observer

# Seconds. Waits span a notified task (milliseconds) to a backlog (an hour);
# handlers run up to minutes; round trips are milliseconds.
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
HANDLER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
ROUND_TRIP_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
)  # fmt: skip
NOTIFY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

_UTC = datetime.timezone.utc


class PrometheusObserver(Observer):
    measures_round_trips = True  # nsjq_claim_duration_seconds, nsjq_completion_duration_seconds

    def __init__(self, queue: str):
        self.queue = queue
        self.registry = CollectorRegistry()
        for collector in (ProcessCollector, PlatformCollector):
            collector(registry=self.registry)
        self.registry.register(GC_COLLECTOR)
        self.finished = Counter(
            "nsjq_tasks_finished",
            "Attempts finished by this worker, by processo and outcome",
            ("queue", "processo", "outcome"),
            registry=self.registry,
        )
        self.queue_wait = self._histogram(
            "nsjq_queue_wait_seconds",
            "From a task's due time (data_hora) to its claim",
            WAIT_BUCKETS,
            "processo",
        )
        self.handler = self._histogram(
            "nsjq_handler_duration_seconds",
            "Handler run time, whether it returned or raised",
            HANDLER_BUCKETS,
            "processo",
        )
        self.claim = self._histogram(
            "nsjq_claim_duration_seconds",
            "Round trip of one claim (result: task or empty)",
            ROUND_TRIP_BUCKETS,
            "result",
        )
        self.completion = self._histogram(
            "nsjq_completion_duration_seconds",
            "Round trip of one success: its commit (with the next claim where they travel together)",
            ROUND_TRIP_BUCKETS,
        )
        self.notify_to_claim = self._histogram(
            "nsjq_notification_to_claim_seconds",
            "From a notification of a ready task to this worker's next claim",
            NOTIFY_BUCKETS,
        )
        self.process_delay, self.process_duration = self._process_histograms()
        # The children without a per-task label, bound once (a labels() call per task costs).
        self._claimed = self.claim.labels(queue, "task")
        self._empty = self.claim.labels(queue, "empty")
        self._completed = self.completion.labels(queue)
        self._notify_to_claim = self.notify_to_claim.labels(queue)
        # Children by label values, looked up without labels()' validation and lock.
        self._children: dict[tuple[Any, ...], Any] = {}
        self._notified_at: float | None = None
        self._lock = threading.Lock()

    def _process_histograms(self) -> tuple[Histogram, Histogram]:
        """Process instances' (nsj_queue_lib/process/): no process_id label, whose values are
        unbounded; kind is one of four, processo is the queue's own."""
        delay = self._histogram(
            "nsjq_process_task_delay_seconds",
            "From a process's task's due time (a call's enqueue, a timer's due time) to its "
            "start, by kind (start, call, repair, timer)",
            WAIT_BUCKETS,
            "kind",
        )
        duration = self._histogram(
            "nsjq_process_task_duration_seconds",
            "A process's task's run (its handler with the process's load and save), by "
            "processo and kind",
            HANDLER_BUCKETS,
            "processo",
            "kind",
        )
        return delay, duration

    def _histogram(
        self, name: str, text: str, buckets: tuple[float, ...], *labels: str
    ) -> Histogram:
        return Histogram(name, text, ("queue", *labels), buckets=buckets, registry=self.registry)

    def _child(self, metric: Counter | Histogram, *values: str) -> Any:
        key = (id(metric), *values)
        child = self._children.get(key)
        if child is None:
            child = self._children.setdefault(key, metric.labels(self.queue, *values))
        return child

    # -- Observer --

    def task_claimed(self, task: TaskRecord) -> None:
        processo = str(task.row.get("processo") or "")
        waited = seconds_waited(task.row.get("data_hora"), datetime.datetime.now(_UTC))
        if waited is not None:
            self._child(self.queue_wait, processo).observe(waited)
        with self._lock:
            notified, self._notified_at = self._notified_at, None
        if notified is not None:
            self._notify_to_claim.observe(time.monotonic() - notified)

    def claim_round_trip(self, seconds: float, claimed: bool) -> None:
        (self._claimed if claimed else self._empty).observe(seconds)
        if not claimed:
            with self._lock:
                self._notified_at = None  # the notified task went to another worker

    def completion_round_trip(self, seconds: float) -> None:
        self._completed.observe(seconds)

    def handler_ran(self, processo: str, seconds: float) -> None:
        self._child(self.handler, processo).observe(seconds)

    def task_finished(self, task: TaskRecord, outcome: str) -> None:
        self._child(self.finished, str(task.row.get("processo") or ""), outcome).inc()

    def process_task_ran(
        self, processo: str, kind: str, delay: float | None, seconds: float
    ) -> None:
        if delay is not None:
            self._child(self.process_delay, kind).observe(delay)
        self._child(self.process_duration, processo, kind).observe(seconds)

    def notified(self) -> None:
        with self._lock:
            if self._notified_at is None:
                self._notified_at = time.monotonic()

    # -- the worker's state and the queue's depth --

    def watch(
        self,
        running: Callable[[], int],
        busy: Callable[[], int],
        executors: int,
        pool_stats: Callable[[], dict[str, int]],
        depth: DepthSnapshot,
    ) -> None:
        """Gauges read at each scrape, and the depth sample."""

        def gauge(name: str, text: str, read: Callable[[], float]) -> None:
            Gauge(name, text, ("queue",), registry=self.registry).labels(self.queue).set_function(
                read
            )

        gauge("nsjq_running_tasks", "Tasks whose handler runs now", running)
        gauge("nsjq_busy_executors", "Executor threads claiming or running tasks", busy)
        gauge("nsjq_executors", "Executor threads (QUEUE_CONCURRENCY)", lambda: executors)
        gauge(
            "nsjq_pool_connections_in_use",
            "Pooled connections held by executors",
            lambda: _in_use(pool_stats()),
        )
        gauge(
            "nsjq_pool_connections_max",
            "Most connections the executors' pool opens",
            lambda: pool_stats().get("pool_max", 0),
        )
        self.registry.register(_DepthCollector(self.queue, depth))

    def register_breakers(self, recorder: Any) -> None:
        """The circuit breakers of ``recorder`` (fleet/breaker_recorder.py) as metrics."""
        self.registry.register(_BreakerCollector(self.queue, recorder))

    def register_subscriber_breakers(self, breakers: Any) -> None:
        """The webhook subscribers' circuit breakers (fleet/subscriber_breakers.py)."""
        self.registry.register(_SubscriberBreakerCollector(self.queue, breakers))

    def exposition(self, accept: str) -> tuple[str, bytes]:
        """(content type, body) of a scrape, in the format the ``Accept`` header asks for."""
        encoder, content_type = choose_encoder(accept)
        return content_type, encoder(self.registry)


def _in_use(stats: dict[str, int]) -> int:
    return max(0, stats.get("pool_size", 0) - stats.get("pool_available", 0))


class _DepthCollector:
    """The depth sample as gauges; nothing on the workers that do not sample."""

    def __init__(self, queue: str, snapshot: DepthSnapshot):
        self.queue = queue
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        sample = self.snapshot.current()
        if sample is None:
            return
        tasks = GaugeMetricFamily(
            "nsjq_queue_tasks",
            "Tasks with work ahead by processo and status (sampled by one worker of the queue)",
            labels=("queue", "processo", "status"),
        )
        oldest = GaugeMetricFamily(
            "nsjq_queue_oldest_ready_seconds",
            "Age of the oldest ready 'pendente' task by processo (sampled)",
            labels=("queue", "processo"),
        )
        for row in sample.rows:
            processo = str(row["processo"] or "")
            tasks.add_metric((self.queue, processo, str(row["status"])), row["tasks"])
            if row.get("oldest_ready_seconds") is not None:
                oldest.add_metric((self.queue, processo), row["oldest_ready_seconds"])
        taken = GaugeMetricFamily(
            "nsjq_queue_depth_sampled_timestamp_seconds",
            "When this worker last sampled the queue depth (Unix time)",
            labels=("queue",),
        )
        taken.add_metric((self.queue,), sample.taken_at)
        paused = GaugeMetricFamily(
            "nsjq_queue_paused",
            "1 per pause in force (processo '': the whole queue; sampled with the depth)",
            labels=("queue", "processo"),
        )
        paused_until = GaugeMetricFamily(
            "nsjq_queue_paused_until_timestamp_seconds",
            "When a pause given an until ends by itself (Unix time; sampled)",
            labels=("queue", "processo"),
        )
        for pause in sample.pauses:
            labels = (self.queue, pause.processo or "")
            paused.add_metric(labels, 1)
            if pause.until is not None:
                paused_until.add_metric(labels, pause.until.timestamp())
        yield from (tasks, oldest, taken, paused, paused_until)


class _BreakerCollector:
    """This worker's circuit breakers: how often it opened and closed each, and each
    one's state as its recorder last read it (fleet/breaker_recorder.py)."""

    def __init__(self, queue: str, recorder: Any):
        self.queue = queue
        self.recorder = recorder

    def collect(self) -> Iterator[Metric]:
        opened = CounterMetricFamily(
            "nsjq_circuit_breaker_opened",
            "Times this worker opened a processo's circuit breaker",
            labels=("queue", "processo"),
        )
        closed = CounterMetricFamily(
            "nsjq_circuit_breaker_closed",
            "Times this worker closed a processo's circuit breaker (its trial succeeded)",
            labels=("queue", "processo"),
        )
        state = GaugeMetricFamily(
            "nsjq_circuit_breaker_open",
            "1 while a processo's circuit breaker is open or half-open (read every second)",
            labels=("queue", "processo"),
        )
        for processo in sorted(self.recorder.breakers):
            opened.add_metric((self.queue, processo), self.recorder.opened.get(processo, 0))
            closed.add_metric((self.queue, processo), self.recorder.closed.get(processo, 0))
            is_open = any(s.open for s in self.recorder.states if s.processo == processo)
            state.add_metric((self.queue, processo), int(is_open))
        yield from (opened, closed, state)


class _SubscriberBreakerCollector:
    """This worker's webhook subscribers' circuit breakers: how often it opened and closed
    each, and each one's state as this worker last saw it (at a delivery)."""

    def __init__(self, queue: str, breakers: Any):
        self.queue = queue
        self.breakers = breakers

    def collect(self) -> Iterator[Metric]:
        labels = ("queue", "subscriber")
        opened = CounterMetricFamily(
            "nsjq_subscriber_circuit_breaker_opened",
            "Times this worker opened a webhook subscriber's circuit breaker",
            labels=labels,
        )
        closed = CounterMetricFamily(
            "nsjq_subscriber_circuit_breaker_closed",
            "Times this worker closed a webhook subscriber's circuit breaker (its trial succeeded)",
            labels=labels,
        )
        state = GaugeMetricFamily(
            "nsjq_subscriber_circuit_breaker_open",
            "1 while a webhook subscriber's circuit breaker is open or half-open, as this "
            "worker last saw it",
            labels=labels,
        )
        for subscriber in sorted(self.breakers.open_now):
            opened.add_metric((self.queue, subscriber), self.breakers.opened.get(subscriber, 0))
            closed.add_metric((self.queue, subscriber), self.breakers.closed.get(subscriber, 0))
            state.add_metric((self.queue, subscriber), int(self.breakers.open_now[subscriber]))
        yield from (opened, closed, state)
