"""OpenTelemetry end to end (docs/integrations/opentelemetry.md), on PostgreSQL and MariaDB.

A test span encloses ``insert_task``; a real worker process (``traced_worker.py``,
its spans in a file) runs the task. The worker's attempt span is in the
enqueue's trace, the enqueue span its parent (and its link); the handler's own
span nests under it; a failing attempt records its exception, and each attempt
has its own span, the retry's in the same trace.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.otel import read_spans, require_otel
from tests.helpers.processes import wait_for

require_otel()

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from tests.contract.backends import WORKER_SCRIPT  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

TRACED_WORKER = WORKER_SCRIPT.parent / "traced_worker.py"
DIRECT = [
    pytest.param("postgres", id="postgres"),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


def attempt_spans(path, count):
    def ended():
        found = [s for s in read_spans(path) if s["name"].endswith(" process")]
        return found if len(found) >= count else None

    return wait_for(ended, 30, f"{count} attempt span(s) in {path}")


@pytest.mark.parametrize("backend", DIRECT, indirect=True)
def test_the_worker_span_continues_the_enqueue_trace_and_records_failures(backend):
    spans_file = backend.directory / "spans.jsonl"
    backend.start_process(
        "traced", script=TRACED_WORKER, NSJQ_TEST_SPANS=spans_file, QUEUE_OTEL="true"
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("test").start_as_current_span("enqueue"):
        [ok] = backend.enqueue([dict(chave_externa="ok")])
    with provider.get_tracer("test").start_as_current_span("enqueue twice"):
        [twice] = backend.enqueue(
            [dict(chave_externa="twice", payload=json.dumps({"fail_on": [1]}))], bulk=True
        )
    enqueue, enqueue_twice = exporter.get_finished_spans()

    found = attempt_spans(spans_file, 3)
    by_task = {}
    for span in found:
        by_task.setdefault(span["attributes"]["nsjq.task.first_id"], []).append(span)
    [success] = by_task[ok]
    assert success["kind"] == "CONSUMER" and success["name"] == "processar process"
    assert success["trace_id"] == f"{enqueue.context.trace_id:032x}"
    assert success["parent_span_id"] == f"{enqueue.context.span_id:016x}"
    assert success["links"] == [f"{enqueue.context.span_id:016x}"]
    assert success["attributes"]["nsjq.outcome"] == "sucesso" and success["status"] == "UNSET"
    assert success["attributes"]["nsjq.queue"] == backend.name
    # The handler's own span nests under the attempt's.
    [work] = [s for s in read_spans(spans_file) if s["parent_span_id"] == success["span_id"]]
    assert work["name"] == "handler work" and work["trace_id"] == success["trace_id"]

    # Two attempts, two spans, both children of the enqueue (the retry carries the context).
    failed, retried = sorted(by_task[twice], key=lambda s: s["attributes"]["nsjq.task.attempt"])
    for span in (failed, retried):
        assert span["trace_id"] == f"{enqueue_twice.context.trace_id:032x}"
        assert span["parent_span_id"] == f"{enqueue_twice.context.span_id:016x}"
    assert failed["attributes"]["nsjq.task.attempt"] == 1
    assert failed["attributes"]["nsjq.outcome"] == "falha" and failed["status"] == "ERROR"
    assert failed["exception_types"] == ["RuntimeError"]
    assert failed["attributes"]["error.type"] == "RuntimeError"
    assert retried["attributes"]["nsjq.outcome"] == "sucesso"
    assert retried["attributes"]["nsjq.task.id"] != failed["attributes"]["nsjq.task.id"]
    # The table holds the enqueue's context on both attempts.
    stored = backend.query(
        f"SELECT DISTINCT trace_context FROM {backend.table} WHERE id <> %s", (ok,)
    )
    context = enqueue_twice.context
    assert [row["trace_context"] for row in stored] == [
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    ]


@pytest.mark.parametrize("backend", DIRECT, indirect=True)
def test_without_a_span_nothing_is_stored_and_tracing_off_exports_nothing(backend):
    spans_file = backend.directory / "spans.jsonl"
    backend.start_process(
        "untraced", script=TRACED_WORKER, NSJQ_TEST_SPANS=spans_file, QUEUE_OTEL="false"
    )
    [task] = backend.enqueue([dict(chave_externa="plain")])
    wait_for(lambda: backend.row(task)["status"] == "sucesso", 30, "the task to succeed")
    assert backend.row(task)["trace_context"] is None
    # Only the handler's own span, a root: the worker made none.
    assert [(s["name"], s["parent_span_id"]) for s in read_spans(spans_file)] == [
        ("handler work", None)
    ]
