"""The benchmarks' worker: a real worker process whose handler does nothing.

Run by ``run_all.py`` as ``python benchmarks/bench_worker.py`` with the usual
environment (DB_HOST, DB_PORT, DB_BASE, DB_USER, QUEUE_NAME, QUEUE_TABLE,
QUEUE_CONCURRENCY, LOG_DEBUG=false, ...).

``execute`` returns None and touches nothing. When ``BENCH_LATENCY_FILE`` is
set, it first appends ``"<task id> <time.time()>"`` to that file (one
unbuffered ``os.write`` per task, no database access), so the parent can
compute enqueue-commit -> handler-start latencies on the same clock.

``BENCH_HANDLER=async`` runs ``AsyncNoopWorker`` instead: the same handler
declared ``async def``, awaiting ``asyncio.sleep(BENCH_ASYNC_SLEEP)`` seconds
first when that is set (bench_async.py).

``BENCH_PROCESS_STATE=1``: a task of a process (bench_processes.py) counts its calls in
its process's state (``state["n"]``), which is then written with its commit.

``BENCH_STEP=1``: each task runs one durable step (its checkpoint written with the task's
commit).

``BENCH_READY_FILE``: the worker writes its pid there once its dispatcher is connected
(LISTEN issued, or polling) and its pool's connections are open (bench_mysql.py's
harness waits for it).

``BENCH_OTEL_SDK=memory`` sets up OpenTelemetry's SDK first, its spans going
to an in-memory exporter through a batch processor (as an application's
exporter would take them): the cost of QUEUE_OTEL's spans, recorded.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

from nsj_queue_lib import WorkerBase, current_task


class NoopWorker(WorkerBase):
    def __init__(self) -> None:
        super().__init__()
        self._process_state = os.environ.get("BENCH_PROCESS_STATE") == "1"
        self._step = os.environ.get("BENCH_STEP") == "1"
        path = os.environ.get("BENCH_LATENCY_FILE")
        self._latency_fd = (
            os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
        )

    def execute(self, payload, tarefa, bd_conn):
        if self._latency_fd is not None:
            started = time.time()
            os.write(self._latency_fd, f"{tarefa['id']} {started:.6f}\n".encode())
        if self._process_state:
            process = current_task().process
            if process is not None:
                process.state["n"] = process.state.get("n", 0) + 1
        if self._step:
            current_task().step("noop", lambda: tarefa["id"])
        return None


class AsyncNoopWorker(WorkerBase):
    def __init__(self) -> None:
        super().__init__()
        self._sleep = float(os.environ.get("BENCH_ASYNC_SLEEP") or 0)

    async def execute(self, payload, tarefa, bd_conn):
        if self._sleep:
            await asyncio.sleep(self._sleep)
        return None


def setup_tracing() -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    class Forgetting(InMemorySpanExporter):
        """Takes every span and keeps none (a long drain would fill the memory)."""

        def export(self, spans):  # type: ignore[no-untyped-def]
            return super().export(())

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Forgetting()))
    trace.set_tracer_provider(provider)


READY_TIMEOUT_SECONDS = 60.0


def signal_ready(worker: WorkerBase, ready_path: str) -> None:
    """Write this process's pid to ``ready_path`` once the worker can take a task."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        runtime = worker._runtime
        if runtime is not None and runtime.dispatcher._control is not None:
            if hasattr(runtime.pool, "wait"):
                runtime.pool.wait(READY_TIMEOUT_SECONDS)
            Path(ready_path).write_text(str(os.getpid()))
            return
        time.sleep(0.01)


if __name__ == "__main__":
    if os.environ.get("BENCH_OTEL_SDK") == "memory":
        setup_tracing()
    worker = AsyncNoopWorker() if os.environ.get("BENCH_HANDLER") == "async" else NoopWorker()
    ready_path = os.environ.get("BENCH_READY_FILE")
    if ready_path:
        threading.Thread(target=signal_ready, args=(worker, ready_path), daemon=True).start()
    worker.run()
