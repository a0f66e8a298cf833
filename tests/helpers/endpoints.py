"""Talking to a worker's endpoints (QUEUE_METRICS_PORT) in tests: free ports, GETs, samples."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any


def free_port() -> int:
    """A TCP port nothing listens on now (the OS's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(port: int, path: str, timeout: float = 5) -> tuple[int | None, bytes, float]:
    """(status or None when nothing answers, body, seconds) of ``GET http://127.0.0.1:port/path``."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    started = time.perf_counter()
    try:
        with opener.open(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except OSError:
        status, body = None, b""
    return status, body, time.perf_counter() - started


def get_json(port: int, path: str) -> tuple[int | None, Any]:
    status, body, _ = get(port, path)
    return status, (json.loads(body) if body else None)


def samples(port: int) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of ``/metrics``: (name, labels, value)."""
    from prometheus_client.parser import text_string_to_metric_families

    status, body, _ = get(port, "/metrics")
    assert status == 200, (status, body[:500])
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    ]


def total(found: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(
        value
        for sample, have, value in found
        if sample == name and all(have.get(k) == v for k, v in labels.items())
    )
