"""``nsjq health``: ask the worker on this host whether it is ready (or alive), for exec probes.

It reads the worker's own endpoint, ``http://127.0.0.1:$QUEUE_METRICS_PORT/readyz``
(``/healthz`` with ``--live``), so it checks the worker process itself, not only
the database; it needs no database settings. Exit code 0 when the endpoint
answers 200, 1 when it answers otherwise or not at all, 2 when no port is known.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from nsj_queue_lib.cli.errors import EXIT_NOTHING, EXIT_OK, UsageError
from nsj_queue_lib.cli.output import write, write_json

DEFAULT_TIMEOUT_SECONDS = 2.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,  # also accepted before the command
        help="print one JSON document",
    )
    parser.add_argument(
        "--live", action="store_true", help="liveness (/healthz) instead of readiness (/readyz)"
    )
    parser.add_argument("--port", type=_port, help="the worker's port (QUEUE_METRICS_PORT)")
    parser.add_argument("--host", default="127.0.0.1", help="the worker's host (127.0.0.1)")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS, help="seconds to wait (2)"
    )


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be 1 to 65535, got {port}")
    return port


def _configured_port(args: argparse.Namespace) -> int:
    if args.port is not None:
        port: int = args.port
        return port
    text = os.environ.get("QUEUE_METRICS_PORT", "").strip()
    if not text:
        raise UsageError("no port: set QUEUE_METRICS_PORT (as the worker has it) or pass --port")
    try:
        return _port(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"QUEUE_METRICS_PORT: {exc}") from None


def probe(url: str, timeout: float) -> tuple[int | None, Any, str | None]:
    """(HTTP status or None, the JSON answer or None, the error) of one GET, through no proxy."""
    # Imported here: urllib costs every other command's start-up some 20 ms.
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (OSError, ValueError) as exc:  # refused, timed out, unreachable
        return None, None, str(getattr(exc, "reason", None) or exc)
    try:
        return status, json.loads(body), None
    except ValueError:
        return status, None, "the answer is not JSON"


def health(args: argparse.Namespace) -> int:
    check = "live" if args.live else "ready"
    path = "/healthz" if args.live else "/readyz"
    url = f"http://{args.host}:{_configured_port(args)}{path}"
    status, answer, error = probe(url, args.timeout)
    healthy = status == 200
    if args.json:
        write_json(
            {
                "check": check,
                "url": url,
                "healthy": healthy,
                "http_status": status,
                "answer": answer,
                "error": error,
            }
        )
    else:
        detail = error or json.dumps(answer, sort_keys=True)
        where = f"HTTP {status}" if status is not None else "no answer"
        write(f"{check}: {'ok' if healthy else 'FAILED'} ({url}: {where}: {detail})")
    return EXIT_OK if healthy else EXIT_NOTHING
