"""``contract_worker.py`` with OpenTelemetry's SDK set up: its spans go to a file the test reads.

Environment: as ``contract_worker.py``, and NSJQ_TEST_SPANS, the file that gets one
JSON line per ended span (``tests/helpers/otel.py`` reads it). Each attempt's
handler opens a span of its own ("handler work"), which must nest under the
attempt's span. A real application configures its exporter (OTLP, ...) the same
way, before ``run()``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from tests.contract.workers.contract_worker import ContractWorker
from tests.helpers.otel import span_record


class FileExporter(SpanExporter):
    """One JSON line per ended span, appended at once (the test reads while the worker runs)."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()

    def export(self, spans):
        lines = "".join(json.dumps(span_record(span), default=str) + "\n" for span in spans)
        with self.lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS


class TracedWorker(ContractWorker):
    def execute(self, payload, tarefa, bd_conn):
        with trace.get_tracer("tests").start_as_current_span("handler work"):
            return super().execute(payload, tarefa, bd_conn)


if __name__ == "__main__":
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["NSJQ_TEST_SPANS"])))
    trace.set_tracer_provider(provider)
    TracedWorker().run()
