"""Process instances on PostgreSQL (issue 42): calls to many processes against plain tasks,
and the calls one process sustains.

1. Paired rounds, in alternating order: ``--tasks`` plain no-op tasks, and one call to
   each of ``--tasks`` distinct processes (started, and their start tasks drained,
   before the clock starts), each on a fresh queue drained by the same worker
   processes' set-up. The time runs from the enqueue's commit until the last task is
   'sucesso'; the ratio is plain time / process time (the target: at least 0.8, the
   calls drain at least 0.8x as fast). A call costs the worker its process's row read
   and locked, then its state written, in the task's transaction.
2. One process, ``--calls`` calls enqueued at once: they run one at a time (the
   process's lock key), each reading the state the previous one committed; calls per
   second from the commit until the last one's success (the target: at least 200).

    .venv/bin/python benchmarks/bench_processes.py [--rounds 3] [--tasks 1000] [--calls 1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import (  # noqa: E402 - the harness next to this file
    connect,
    fresh_queue,
    running_workers,
    task_rows,
    wait_succeeded,
)
from bench_mysql import DEFAULT_PG_DSN  # noqa: E402

from nsj_queue_lib import QueueClient  # noqa: E402


def drain_plain(dsn: str, tasks: int, processes: int, concurrency: int, logs: Path) -> float:
    with fresh_queue(dsn) as queue, running_workers(dsn, queue, processes, concurrency, logs):
        with connect(dsn) as conn:
            ids = QueueClient(conn, f"public.{queue}").insert_tasks(task_rows(tasks))
            conn.commit()
            t0 = time.perf_counter()
            return wait_succeeded(conn, queue, ids[0], ids[-1], tasks, t0, 600)


def drain_calls(dsn: str, tasks: int, processes: int, concurrency: int, logs: Path) -> float:
    with fresh_queue(dsn) as queue, running_workers(dsn, queue, processes, concurrency, logs):
        with connect(dsn) as conn:
            client = QueueClient(conn, f"public.{queue}")
            starts = [client.start_process(f"p-{n}", "noop", {"n": n}) for n in range(tasks)]
            conn.commit()
            wait_succeeded(conn, queue, starts[0], starts[-1], tasks, time.perf_counter(), 600)
            calls = [client.call_process(f"p-{n}", "noop", {"n": n}) for n in range(tasks)]
            conn.commit()
            t0 = time.perf_counter()
            return wait_succeeded(conn, queue, calls[0], calls[-1], tasks, t0, 600)


def serialized(dsn: str, calls: int, processes: int, concurrency: int, logs: Path) -> float:
    """Calls per second of one process."""
    with fresh_queue(dsn) as queue, running_workers(dsn, queue, processes, concurrency, logs):
        with connect(dsn) as conn:
            client = QueueClient(conn, f"public.{queue}")
            first = client.start_process("one", "noop", {})
            ids = [client.call_process("one", "noop", {"n": n}) for n in range(calls)]
            conn.commit()
            t0 = time.perf_counter()
            seconds = wait_succeeded(conn, queue, first, ids[-1], calls + 1, t0, 600)
            return (calls + 1) / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_PG_DSN)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="bench-processes-"))
    print(f"{args.processes} worker processes x {args.concurrency} slots, PostgreSQL")
    ratios, rates = [], []
    for round_ in range(args.rounds):
        runs = {}
        order = ["plain", "calls"] if round_ % 2 == 0 else ["calls", "plain"]
        for kind in order:
            drain = drain_plain if kind == "plain" else drain_calls
            runs[kind] = drain(args.dsn, args.tasks, args.processes, args.concurrency, logs)
        ratio = runs["plain"] / runs["calls"]
        ratios.append(ratio)
        rate = serialized(args.dsn, args.calls, args.processes, args.concurrency, logs)
        rates.append(rate)
        print(
            f"round {round_ + 1}: {args.tasks} plain tasks {runs['plain']:.2f} s "
            f"({args.tasks / runs['plain']:.0f}/s); calls to {args.tasks} processes "
            f"{runs['calls']:.2f} s ({args.tasks / runs['calls']:.0f}/s); ratio {ratio:.2f}; "
            f"one process: {rate:.0f} calls/s"
        )
    print(
        f"median ratio (calls' speed / plain speed): {statistics.median(ratios):.2f}; "
        f"one process, median: {statistics.median(rates):.0f} calls/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
