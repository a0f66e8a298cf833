"""Talking to a worker's endpoints (QUEUE_METRICS_PORT) in tests: free ports, GETs, samples."""

from __future__ import annotations

import json
import os
import random
import socket
import time
import urllib.error
import urllib.request
from typing import Any

# Below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by
# default). A port the kernel picked from that range for bind(0) can be handed out again
# as the local port of any outgoing connection (the suite opens thousands) before the
# server that was meant to bind it does: a 1.2.2 server then failed with EADDRINUSE.
TEST_PORTS = range(20_000, 32_000)
# Each xdist worker picks from its own slice: two workers could otherwise pick the same
# free port before either server binds it (a metrics server then failed with EADDRINUSE).
SLICES = 16
_choice = random.Random()  # seeded from the OS
# Ports handed out by this process: a cluster's dozen are chosen before any server binds
# one, and a port free now can be chosen again for the next node.
_handed_out: set[int] = set()


def worker_ports(worker: str | None) -> range:
    """The ports of the xdist worker named ``worker`` (``gw0``, ``gw1``...); all of
    TEST_PORTS outside xdist."""
    if not worker or not worker.startswith("gw") or not worker[2:].isdigit():
        return TEST_PORTS
    width = len(TEST_PORTS) // SLICES
    start = TEST_PORTS.start + (int(worker[2:]) % SLICES) * width
    return range(start, start + width)


def free_port() -> int:
    """A TCP port nothing listens on now, outside the ephemeral range and in this xdist
    worker's slice, not handed out before by this process."""
    ports = worker_ports(os.environ.get("PYTEST_XDIST_WORKER"))
    for _ in range(500):
        port = _choice.choice(ports)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("", port))  # every address: a server may bind any of them
            except OSError:
                continue
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free port in {ports}")


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
