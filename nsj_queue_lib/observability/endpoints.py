"""QUEUE_METRICS_PORT: one worker's metrics, health and depth sampling, and their HTTP server.

The runtime builds one ``Endpoints`` when the port is set, wraps its parts
with it (listener, handler; the claims with its observer: ``measured.py``), starts its server
before connecting (so ``/healthz`` answers while the database is awaited),
and closes it last when the worker stops.

- ``/metrics``: Prometheus text (or OpenMetrics, by the ``Accept`` header);
- ``/healthz``, ``/readyz``: JSON documents, 200 or 503 (``health.py``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.observability.depth import DepthSampler, DepthSnapshot
from nsj_queue_lib.observability.endpoint_server import EndpointServer, Response
from nsj_queue_lib.observability.health import READY_MARGIN_SECONDS, Health, Verdict
from nsj_queue_lib.observability.measured import (
    Contact,
    MeasuredListener,
    TaskHandler,
    timed_handler,
)
from nsj_queue_lib.settings import Settings

if TYPE_CHECKING:
    from nsj_queue_lib.db.driver import Listener
    from nsj_queue_lib.db.queue_store import InspectionStore
    from nsj_queue_lib.runtime.service import ServiceLock

logger = get_logger("endpoints")

MISSING_CLIENT = (
    "needs the prometheus_client package: pip install 'nsj-queue-lib[metrics]' "
    "(or unset QUEUE_METRICS_PORT)"
)
JSON = "application/json"


class Endpoints:
    def __init__(self, settings: Settings, stop: threading.Event):
        """Raises ``ConfigError`` naming QUEUE_METRICS_PORT when prometheus_client is missing."""
        try:
            from nsj_queue_lib.observability.prometheus import PrometheusObserver
        except ImportError:
            raise ConfigError({"QUEUE_METRICS_PORT": MISSING_CLIENT}) from None
        assert settings.queue_metrics_port is not None
        self.settings = settings
        self.stop = stop
        self.observer = PrometheusObserver(settings.queue_name)
        self.contact = Contact()
        self.health = Health(
            stop, self.contact, settings.queue_wait_notify_interval + READY_MARGIN_SECONDS
        )
        self.depth = DepthSnapshot(settings.queue_metrics_depth_interval)
        self.server = EndpointServer(
            settings.queue_metrics_port,
            {"/metrics": self._metrics, "/healthz": self._healthz, "/readyz": self._readyz},
        )

    # -- the runtime's parts, measured --

    def listener(self, inner: Listener, notifications: bool) -> Listener:
        return MeasuredListener(inner, self.contact, self.observer, notifications)

    def handler(self, inner: TaskHandler) -> TaskHandler:
        return timed_handler(inner, self.observer)

    def depth_sampler(
        self, store: InspectionStore, connect: Callable[[], Any], lock: ServiceLock
    ) -> DepthSampler:
        return DepthSampler(store, connect, lock, self.stop, self.depth)

    def watch(
        self,
        running: Callable[[], int],
        busy: Callable[[], int],
        pool_stats: Callable[[], dict[str, int]],
    ) -> None:
        self.observer.watch(running, busy, self.settings.queue_concurrency, pool_stats, self.depth)

    def report_wakeups(self, state: Callable[[], dict[str, str]]) -> None:
        """How the dispatcher learns of new tasks, for /readyz (``health.py``)."""
        self.health.wakeups = state

    def supervise(
        self,
        threads: Sequence[threading.Thread],
        more_dead: Callable[[], Sequence[threading.Thread]],
    ) -> None:
        self.health.watch(threads, more_dead)

    # -- serving --

    def start(self) -> None:
        """Serve; ``EndpointServerError`` when the port cannot be listened on."""
        self.server.start()
        logger.info(
            "queue=%s: /metrics, /healthz and /readyz on port %d",
            self.settings.queue_name,
            self.settings.queue_metrics_port,
        )

    def close(self) -> None:
        self.server.close()

    def _metrics(self, accept: str) -> Response:
        content_type, body = self.observer.exposition(accept)
        return 200, content_type, body

    def _healthz(self, accept: str) -> Response:
        return _json(self.health.liveness())

    def _readyz(self, accept: str) -> Response:
        return _json(self.health.readiness())


def _json(verdict: Verdict) -> Response:
    body = (json.dumps(verdict.document, sort_keys=True) + "\n").encode()
    return (200 if verdict.ok else 503), JSON, body
