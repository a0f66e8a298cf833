"""What OpenTelemetry tracing costs per task, in the worker's and the client's Python (no database).

    .venv/bin/python benchmarks/bench_otel.py [--tasks 20000] [--rounds 7]

Each case runs in a fresh interpreter (so "never imported" really is), ``--tasks``
times per round; the table gives the median microseconds per task over the rounds:

- the client's ``capture()`` (what ``insert_task`` adds): OpenTelemetry never
  imported; imported with no span active; inside an active SDK span;
- a worker's attempt: the handler wrapper and the span's end (``task_finished``),
  with no SDK configured (the no-op tracer), and with the SDK, a batch span
  processor and an exporter that drops what it gets; against the bare handler.

The drains of ``bench_commits.py`` (``--old-env``/``--new-env QUEUE_OTEL=...``,
``BENCH_OTEL_SDK=memory``) measure the same in a worker process, with the noise
of a real drain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap

_CASE = textwrap.dedent(
    """
    import json, sys, time
    case, tasks, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    from nsj_queue_lib.model import TaskRecord
    from nsj_queue_lib.observability.observer import SUCESSO
    from nsj_queue_lib.observability.trace_context import capture, encode

    def sdk():
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

        class Drop(SpanExporter):
            def export(self, spans):
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Drop()))
        trace.set_tracer_provider(provider)
        return trace

    row = {"id": 1, "id_inicial": None, "processo": "p", "tentativa": 1, "dead": False,
           "payload": "x", "trace_context": encode(0x0AF7651916CD43DD8448EB211C80319C,
                                                   0xB7AD6B7169203331, 1)}
    task = TaskRecord.from_row(row)
    handler = lambda r, c: None
    if case.startswith("capture"):
        if case != "capture: never imported":
            trace = sdk()
        if case == "capture: in a span":
            scope = trace.get_tracer("bench").start_as_current_span("enqueue")
            scope.__enter__()
        step = capture
    else:
        if case == "attempt: SDK, batch processor":
            sdk()
        run = handler
        if case != "attempt: no tracing":
            from nsj_queue_lib.observability.tracing import AttemptTracer
            tracer = AttemptTracer("bench")
            wrapped = tracer.handler(handler)
            def run(r, c):
                wrapped(r, c)
                tracer.task_finished(task, SUCESSO)
        step = lambda: run(row, None)
    results = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(tasks):
            step()
        results.append((time.perf_counter() - started) / tasks * 1e6)
    print(json.dumps(results))
    """
)

CASES = (
    "capture: never imported",
    "capture: imported, no span",
    "capture: in a span",
    "attempt: no tracing",
    "attempt: no SDK (no-op tracer)",
    "attempt: SDK, batch processor",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    print(f"{'case':34} {'us per task (median)':>22} {'range':>16}")
    for case in CASES:
        out = subprocess.run(
            [sys.executable, "-c", _CASE, case, str(args.tasks), str(args.rounds)],
            capture_output=True,
            text=True,
            check=True,
        )
        times = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{case:34} {statistics.median(times):>22.2f} {min(times):>7.2f}-{max(times):<7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
