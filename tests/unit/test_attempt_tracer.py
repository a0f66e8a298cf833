"""AttemptTracer (observability/tracing.py): the span of one attempt, with the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers.otel import require_otel, span_record

require_otel()

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from nsj_queue_lib.model import TaskRecord  # noqa: E402
from nsj_queue_lib.observability.observer import DEAD, FALHA, SUCESSO  # noqa: E402
from nsj_queue_lib.observability.trace_context import encode  # noqa: E402
from nsj_queue_lib.observability.tracing import AttemptTracer  # noqa: E402

PARENT = (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)


@pytest.fixture
def exporter():
    return InMemorySpanExporter()


def tracer_for(exporter, **options):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return AttemptTracer("fila", tracer=provider.get_tracer("test"), **options)


def row(task_id=7, **more):
    return {
        "id": task_id,
        "id_inicial": 3,
        "processo": "emitir",
        "tentativa": 2,
        "dead": False,
        "payload": "{}",
        "trace_context": encode(*PARENT, 1),
        **more,
    }


def spans(exporter):
    return [span_record(s) for s in exporter.get_finished_spans()]


def test_a_success_is_a_consumer_span_child_of_the_stored_context_current_in_the_handler(exporter):
    tracer = tracer_for(exporter)
    seen = {}

    def handler(task, conn):
        seen["current"] = trace.get_current_span().get_span_context().span_id
        return "ok"

    assert tracer.handler(handler)(row(), None) == "ok"
    assert spans(exporter) == []  # open until the outcome is known
    tracer.task_finished(TaskRecord.from_row(row()), SUCESSO)
    [span] = spans(exporter)
    assert span["name"] == "emitir process" and span["kind"] == "CONSUMER"
    assert (span["trace_id"], span["parent_span_id"]) == (f"{PARENT[0]:032x}", f"{PARENT[1]:016x}")
    assert span["links"] == [f"{PARENT[1]:016x}"]
    assert seen["current"] == int(span["span_id"], 16)
    assert span["status"] == "UNSET"
    attributes = span["attributes"]
    assert {k: attributes[k] for k in ("nsjq.queue", "nsjq.processo", "nsjq.outcome")} == {
        "nsjq.queue": "fila",
        "nsjq.processo": "emitir",
        "nsjq.outcome": "sucesso",
    }
    assert (attributes["nsjq.task.id"], attributes["nsjq.task.first_id"]) == (7, 3)
    assert (attributes["nsjq.task.attempt"], attributes["messaging.system"]) == (2, "nsj_queue_lib")


def test_a_failure_records_its_exception_and_ends_in_error(exporter):
    tracer = tracer_for(exporter)

    def handler(task, conn):
        raise ValueError("boom")

    with pytest.raises(ValueError):
        tracer.handler(handler)(row(), None)
    task = TaskRecord.from_row(row())
    tracer.attempt_failed(task, ValueError("boom"))  # another error: recorded too
    tracer.task_finished(task, DEAD)
    [span] = spans(exporter)
    assert span["exception_types"] == ["ValueError", "ValueError"]
    assert span["status"] == "ERROR"
    assert span["attributes"]["error.type"] == "ValueError"
    assert span["attributes"]["nsjq.outcome"] == "dead"


def test_no_stored_context_is_a_root_span_and_link_only_starts_a_new_trace(exporter):
    tracer = tracer_for(exporter)
    with trace.use_span(trace.NonRecordingSpan(trace.SpanContext(1, 2, False))):
        tracer.handler(lambda t, c: None)(row(trace_context=None), None)
    tracer.task_finished(TaskRecord.from_row(row()), SUCESSO)
    linked = tracer_for(exporter, link_only=True)
    linked.handler(lambda t, c: None)(row(task_id=8), None)
    linked.task_finished(TaskRecord.from_row(row(task_id=8)), FALHA)
    root, new_trace = spans(exporter)
    assert root["parent_span_id"] is None and root["links"] == []
    assert new_trace["parent_span_id"] is None and new_trace["links"] == [f"{PARENT[1]:016x}"]
    assert new_trace["trace_id"] != f"{PARENT[0]:032x}" and new_trace["status"] == "ERROR"


def test_an_async_handler_runs_with_its_span_current(exporter):
    tracer = tracer_for(exporter)

    async def handler(task, conn):
        await asyncio.sleep(0)
        return trace.get_current_span().get_span_context().span_id

    current = asyncio.run(tracer.handler(handler)(row(), None))
    tracer.task_finished(TaskRecord.from_row(row()), SUCESSO)
    [span] = spans(exporter)
    assert current == int(span["span_id"], 16)


def test_spans_without_an_outcome_end_unsettled(exporter):
    tracer = tracer_for(exporter)
    tracer.handler(lambda t, c: None)(row(), None)
    tracer.handler(lambda t, c: None)(row(), None)  # the same attempt again: the first ends
    tracer.handler(lambda t, c: None)(row(task_id=9), None)
    tracer.attempt_abandoned(TaskRecord.from_row(row(task_id=9)), "rescued by another worker")
    tracer.close()
    outcomes = [s["attributes"]["nsjq.outcome"] for s in spans(exporter)]
    assert outcomes == ["unsettled", "abandoned", "unsettled"]


def test_claim_and_commit_spans_only_when_asked(exporter):
    tracer_for(exporter).claim_round_trip(0.001, True)
    assert spans(exporter) == []
    tracer = tracer_for(exporter, claim_spans=True)
    assert tracer.measures_round_trips
    tracer.claim_round_trip(0.001, True)
    tracer.completion_round_trip(0.002)
    assert [s["name"] for s in spans(exporter)] == ["fila claim", "fila commit"]


def test_a_span_that_cannot_start_leaves_the_task_untraced(exporter, caplog):
    tracer = tracer_for(exporter)
    assert tracer.handler(lambda t, c: "ran")({"processo": "p"}, None) == "ran"  # no id
    assert spans(exporter) == [] and "no span for this attempt" in caplog.text


def test_following_the_global_provider_asks_it_at_most_every_recheck_until_an_sdk_is_set(
    exporter, monkeypatch
):
    from nsj_queue_lib.observability import tracing

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    answers = [trace.ProxyTracerProvider()]
    asked = []

    def global_provider():
        asked.append(answers[-1])
        return answers[-1]

    monkeypatch.setattr(tracing.trace, "get_tracer_provider", global_provider)
    now = [1000.0]
    monkeypatch.setattr(tracing.time, "monotonic", lambda: now[0])
    attempts = AttemptTracer("fila")
    # The tracer the worker would use once the application sets its provider.
    attempts.tracer = provider.get_tracer("test")
    run = attempts.handler(lambda task, conn: trace.get_current_span().is_recording())
    asked.clear()  # the constructor's get_tracer asked too

    assert [run(row(task_id=n), None) for n in (1, 2, 3)] == [False, False, False]
    assert len(asked) == 1  # no SDK: believed for NO_SDK_RECHECK_SECONDS
    answers.append(provider)  # the application configures its SDK
    now[0] += tracing.NO_SDK_RECHECK_SECONDS / 2
    assert run(row(task_id=4), None) is False
    now[0] += tracing.NO_SDK_RECHECK_SECONDS
    assert run(row(task_id=5), None) is True
    attempts.task_finished(TaskRecord.from_row(row(task_id=5)), SUCESSO)
    assert len(asked) == 2
    now[0] += 100 * tracing.NO_SDK_RECHECK_SECONDS
    assert run(row(task_id=6), None) is True
    assert len(asked) == 2  # an SDK's provider stays: never asked again
    assert [s.name for s in exporter.get_finished_spans()] == ["emitir process"]
