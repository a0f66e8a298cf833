"""The OpenTelemetry tests need the ``otel`` extra (make venv installs it), and read spans back.

A worker process under test exports its spans with ``FileExporter`` (set up by
``tests/contract/workers/traced_worker.py``): one JSON line per ended span, in
the file ``NSJQ_TEST_SPANS`` names, which the test reads with ``read_spans``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.databases import ci_enabled


def require_otel() -> None:
    """Skip the calling test module without the OpenTelemetry SDK; fail it under CI=true."""
    if importlib.util.find_spec("opentelemetry") is not None and (
        importlib.util.find_spec("opentelemetry.sdk") is not None
    ):
        return
    if ci_enabled():
        pytest.fail("OpenTelemetry is missing (the otel extra; CI=true: make venv installs it)")
    pytest.skip(
        "OpenTelemetry is not installed (pip install -e '.[otel]')", allow_module_level=True
    )


def span_record(span: Any) -> dict[str, Any]:
    """What the tests look at of an SDK ``ReadableSpan``, as JSON-friendly values."""
    parent = span.parent
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_span_id": None if parent is None else f"{parent.span_id:016x}",
        "links": [f"{link.context.span_id:016x}" for link in span.links],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
        "exception_types": [
            (event.attributes or {}).get("exception.type")
            for event in span.events
            if event.name == "exception"
        ],
    }


def read_spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
