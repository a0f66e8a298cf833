"""Process instances on PostgreSQL (issue 42): calls to many processes against plain tasks,
and the calls one process sustains.

1. Paired rounds, in rotating order: ``--tasks`` plain no-op tasks; the same tasks each
   with a lock key of its own (what a process's tasks share, ``process:<id>``, without
   the process: the lock key's part of a call's cost); one no-op call to
   each of ``--tasks`` distinct processes (started, and their start tasks drained,
   before the clock starts); and the same calls each counting itself in its process's
   state (``BENCH_PROCESS_STATE=1``: the state is written with the task's commit). Each
   on a fresh queue drained by the same worker processes' set-up. The time runs from
   the enqueue's commit until the last task is 'sucesso'; the ratios are plain time /
   calls' time (the target: at least 0.8). A call costs the worker its process's row
   read and locked (with group commit: once per group, for all its process tasks), and,
   when it changed something, its write (with group commit: in the settle's round trip).
2. One process, ``--calls`` calls enqueued at once, each counting itself in the
   process's state: they run one at a time (the process's lock key), each reading the
   state the previous one committed; calls per second from the commit until the last
   one's success (the target: at least 200).

    .venv/bin/python benchmarks/bench_processes.py [--rounds 3] [--tasks 3000] [--calls 1000]

``--tasks`` 3,000 by default: a drain of 1,000 lasts about 0.2 s here, which the first
groups' start blurs by a tenth or more.
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


def drain_keyed(dsn: str, tasks: int, processes: int, concurrency: int, logs: Path) -> float:
    with fresh_queue(dsn) as queue, running_workers(dsn, queue, processes, concurrency, logs):
        with connect(dsn) as conn:
            rows = [{**row, "lock_key": f"k-{n}"} for n, row in enumerate(task_rows(tasks))]
            ids = QueueClient(conn, f"public.{queue}").insert_tasks(rows)
            conn.commit()
            t0 = time.perf_counter()
            return wait_succeeded(conn, queue, ids[0], ids[-1], tasks, t0, 600)


def drain_calls(
    dsn: str, tasks: int, processes: int, concurrency: int, logs: Path, state: bool = False
) -> float:
    extra = {"BENCH_PROCESS_STATE": "1"} if state else None
    with (
        fresh_queue(dsn) as queue,
        running_workers(dsn, queue, processes, concurrency, logs, extra),
    ):
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
    """Calls per second of one process, each counting itself in the process's state."""
    extra = {"BENCH_PROCESS_STATE": "1"}
    with (
        fresh_queue(dsn) as queue,
        running_workers(dsn, queue, processes, concurrency, logs, extra),
    ):
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
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="bench-processes-"))
    print(f"{args.processes} worker processes x {args.concurrency} slots, PostgreSQL")
    kinds = ("plain", "keyed", "calls", "calls writing state")
    ratios: dict[str, list[float]] = {kind: [] for kind in kinds[1:]}
    rates = []
    for round_ in range(args.rounds):
        runs = {}
        for kind in kinds[round_ % 4 :] + kinds[: round_ % 4]:
            if kind == "plain":
                runs[kind] = drain_plain(
                    args.dsn, args.tasks, args.processes, args.concurrency, logs
                )
            elif kind == "keyed":
                runs[kind] = drain_keyed(
                    args.dsn, args.tasks, args.processes, args.concurrency, logs
                )
            else:
                runs[kind] = drain_calls(
                    args.dsn,
                    args.tasks,
                    args.processes,
                    args.concurrency,
                    logs,
                    state=kind == "calls writing state",
                )
        for kind in kinds[1:]:
            ratios[kind].append(runs["plain"] / runs[kind])
        rate = serialized(args.dsn, args.calls, args.processes, args.concurrency, logs)
        rates.append(rate)
        print(
            f"round {round_ + 1}: "
            + "; ".join(f"{kind} {args.tasks / runs[kind]:.0f}/s" for kind in kinds)
            + "; ratios "
            + ", ".join(f"{ratios[kind][-1]:.2f}" for kind in kinds[1:])
            + f"; one process: {rate:.0f} calls/s"
        )
    print(
        "medians: "
        + "; ".join(
            f"{kind} / plain speed {statistics.median(ratios[kind]):.2f}" for kind in kinds[1:]
        )
        + f"; one process {statistics.median(rates):.0f} calls/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
