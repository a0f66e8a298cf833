"""What a worker tells the outside about itself: Prometheus metrics and health endpoints.

Off unless ``QUEUE_METRICS_PORT`` is set; then ``endpoints.Endpoints`` serves
``/metrics``, ``/healthz`` and ``/readyz`` on that port (docs/metrics.md).
Only ``observer`` (the no-op seam the runtime calls) is imported when it is
off, so ``prometheus_client`` stays optional.
"""
