"""The stored W3C trace context (observability/trace_context.py): what is written, what is read."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nsj_queue_lib.model import TRACE_CONTEXT_LIMIT
from nsj_queue_lib.observability.trace_context import TraceContext, capture, decode, encode
from tests.helpers.otel import require_otel

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_span_context_is_stored_as_its_traceparent_and_tracestate():
    assert encode(TRACE_ID, SPAN_ID, 1) == TRACEPARENT
    assert encode(TRACE_ID, SPAN_ID, 1, "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7") == (
        TRACEPARENT + ";congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    )
    assert decode(TRACEPARENT + ";congo=t61rcWkgMzE,rojo=00f067aa0ba902b7") == TraceContext(
        TRACE_ID, SPAN_ID, 1, ("congo=t61rcWkgMzE", "rojo=00f067aa0ba902b7")
    )
    assert decode(TRACEPARENT).tracestate_pairs() == []
    assert not decode(TRACEPARENT[:-2] + "00").sampled


@pytest.mark.parametrize(
    "ids",
    [
        (0, SPAN_ID, 1),
        (TRACE_ID, 0, 1),
        (2**128, SPAN_ID, 1),
        (TRACE_ID, 2**64, 1),
        (TRACE_ID, 1, 256),
    ],
)
def test_invalid_ids_store_nothing(ids):
    assert encode(*ids) is None


def test_a_malformed_tracestate_is_dropped_and_a_long_one_cut_from_its_end():
    assert encode(TRACE_ID, SPAN_ID, 1, "Bad Key=x") == TRACEPARENT
    assert encode(TRACE_ID, SPAN_ID, 1, "a=1,a=2") == TRACEPARENT  # a repeated key
    members = [f"k{n}={'v' * 100}" for n in range(8)]
    stored = encode(TRACE_ID, SPAN_ID, 1, ",".join(members))
    assert stored is not None and len(stored) <= TRACE_CONTEXT_LIMIT
    assert decode(stored).tracestate == tuple(members[:4])  # whole members, the first ones


@pytest.mark.parametrize(
    "value",
    [
        None,
        42,
        "",
        "garbage",
        TRACEPARENT.upper(),
        "01" + TRACEPARENT[2:],  # another version
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        TRACEPARENT + "x",  # no separator before a tracestate
        TRACEPARENT + "'; DROP TABLE fila; --",
        TRACEPARENT + ";" + "a=" + "b" * TRACE_CONTEXT_LIMIT,
    ],
)
def test_what_is_not_a_well_formed_stored_context_is_ignored(value):
    assert decode(value) is None or decode(value).tracestate == ()


def test_capture_without_opentelemetry_imports_nothing():
    """With OpenTelemetry never imported, capture stays None and imports nothing."""
    code = (
        "import sys\n"
        "from nsj_queue_lib.observability.trace_context import capture\n"
        "from nsj_queue_lib import QueueClient\n"
        "assert capture() is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_capture_reads_the_current_span():
    require_otel()  # skipped without the otel extra, failed under CI=true
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("test")
    assert capture() is None  # no span active
    with tracer.start_as_current_span("enqueue") as span:
        context = span.get_span_context()
        stored = capture()
    assert decode(stored) == TraceContext(context.trace_id, context.span_id, context.trace_flags)
    with trace.use_span(trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)):
        assert capture() is None
