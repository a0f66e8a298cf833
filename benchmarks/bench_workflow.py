"""Workflows on PostgreSQL (issue 41): a fan-out/fan-in against independent tasks, and
``wait_for_task``'s latency.

1. Paired rounds, in alternating order: 10,001 independent no-op tasks, and a
   1 -> 10,000 -> 1 workflow of no-op tasks (a root, 10,000 children ``after`` it,
   one fan-in ``after`` all of them), each on a fresh queue drained by the same
   worker processes' set-up. The time runs from the enqueue's commit until the
   last task is 'sucesso'; the ratio is independent time / workflow time (>= 0.8
   is the target: the workflow drains at least 0.8x as fast). Measured on the
   shared 2-core machine, 2 x 4 executors, main then this branch back to back:
   median 0.26 (workflow 9.2-10.7 s against 2.3-2.8 s) before the fan-in's count
   was split in slots, 0.59 after (2.9-4.9 s against 1.7-1.9 s);
   docs/benchmarks.md says where the rest goes.
2. ``wait_for_task``: a task enqueued and committed, then waited for on another
   connection while a worker runs it; the time from the commit until the call
   returns, p50 and p95 over ``--waits`` tasks, and the share of it after the task's
   end (by the database's clock). Then the waiter's share alone: tasks ended by an
   UPDATE on another connection, from that commit until the call returns.
   ``--wait-poll`` makes wait_for_task poll, as before its LISTEN; ``--rounds 0``
   measures only this part.

    .venv/bin/python benchmarks/bench_workflow.py [--rounds 3] [--children 10000]
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


def drain_independent(dsn: str, tasks: int, processes: int, concurrency: int, logs: Path) -> float:
    with fresh_queue(dsn) as queue, running_workers(dsn, queue, processes, concurrency, logs):
        with connect(dsn) as conn:
            ids = QueueClient(conn, f"public.{queue}").insert_tasks(task_rows(tasks))
            conn.commit()
            t0 = time.perf_counter()
            return wait_succeeded(conn, queue, ids[0], ids[-1], tasks, t0, 600)


def drain_workflow(dsn: str, children: int, processes: int, concurrency: int, logs: Path) -> float:
    with fresh_queue(dsn) as queue, running_workers(dsn, queue, processes, concurrency, logs):
        with connect(dsn) as conn:
            client = QueueClient(conn, f"public.{queue}")
            [root] = client.insert_tasks(task_rows(1))
            middle = client.insert_tasks([dict(row, after=[root]) for row in task_rows(children)])
            last = client.insert_task("bench", "bench", "noop", "last", {}, after=middle)
            conn.commit()
            t0 = time.perf_counter()
            return wait_succeeded(conn, queue, root, last, children + 2, t0, 600)


def wait_latencies(dsn: str, waits: int, logs: Path) -> tuple[list[float], list[float]]:
    """(commit -> return, the task's end -> return) per task, in seconds: the second is
    the waiter's own share (the end by the database's clock, read after the return)."""
    with fresh_queue(dsn) as queue, running_workers(dsn, queue, 1, 1, logs):
        with connect(dsn) as conn, connect(dsn, autocommit=True) as waiter:
            client = QueueClient(conn, f"public.{queue}")
            waiting = QueueClient(waiter, f"public.{queue}")
            latencies, lags = [], []
            for n in range(waits):
                task_id = client.insert_task("bench", "bench", "noop", str(n), {})
                conn.commit()
                t0 = time.perf_counter()
                view = waiting.wait_for_task(task_id, 10)
                latencies.append(time.perf_counter() - t0)
                assert view["status"] == "sucesso", view
                lag = waiter.execute(
                    f"SELECT extract(epoch FROM clock_timestamp() - finished_at) "
                    f"FROM public.{queue} WHERE id = %s",
                    (task_id,),
                ).fetchone()[0]
                # Less the time since the return (a round trip, measured around the read).
                lags.append(float(lag) - (time.perf_counter() - t0 - latencies[-1]) / 2)
            return latencies, lags


def wake_latencies(dsn: str, waits: int) -> list[float]:
    """The waiter's own share alone: a task ended by an UPDATE committed on another
    connection (no worker), the time from that commit's return until wait_for_task's."""
    import random
    import threading

    with fresh_queue(dsn) as queue:
        table = f"public.{queue}"
        with connect(dsn, autocommit=True) as conn, connect(dsn, autocommit=True) as waiter:
            client, waiting = QueueClient(conn, table), QueueClient(waiter, table)
            latencies = []
            for n in range(waits):
                task_id = client.insert_task("bench", "bench", "noop", str(n), {})
                returned: list[float] = []

                def wait(task_id: int = task_id, returned: list[float] = returned) -> None:
                    waiting.wait_for_task(task_id, 10)
                    returned.append(time.perf_counter())

                thread = threading.Thread(target=wait)
                thread.start()
                # The wait is under way, past its first polling (waiting.POLL_FIRST).
                time.sleep(0.03 + random.random() * 0.02)
                conn.execute(f"UPDATE {table} SET status = 'sucesso' WHERE id = %s", (task_id,))
                committed = time.perf_counter()
                thread.join()
                latencies.append(returned[0] - committed)
            return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_PG_DSN)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--children", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--waits", type=int, default=200)
    parser.add_argument(
        "--wait-poll",
        action="store_true",
        help="wait_for_task polls, as before its LISTEN (a comparison in the same run)",
    )
    args = parser.parse_args()
    if args.wait_poll:
        from nsj_queue_lib.db.postgres.client_store import PostgresClientStore

        PostgresClientStore.end_waiter = lambda self, conn, task_id: None  # type: ignore[method-assign]
    logs = Path(tempfile.mkdtemp(prefix="bench-workflow-"))
    tasks = args.children + 1
    print(f"{args.processes} worker processes x {args.concurrency} slots, PostgreSQL")
    ratios = []
    for round_ in range(args.rounds):
        runs = {}
        order = ["independent", "workflow"] if round_ % 2 == 0 else ["workflow", "independent"]
        for kind in order:
            if kind == "independent":
                runs[kind] = drain_independent(
                    args.dsn, tasks, args.processes, args.concurrency, logs
                )
            else:
                runs[kind] = drain_workflow(
                    args.dsn, args.children, args.processes, args.concurrency, logs
                )
        ratio = runs["independent"] / runs["workflow"]
        ratios.append(ratio)
        print(
            f"round {round_ + 1}: {tasks} independent {runs['independent']:.2f} s "
            f"({tasks / runs['independent']:.0f}/s); 1 -> {args.children} -> 1 workflow "
            f"{runs['workflow']:.2f} s ({(args.children + 2) / runs['workflow']:.0f}/s); "
            f"ratio {ratio:.2f}"
        )
    if ratios:  # --rounds 0 measures wait_for_task alone
        print(f"median ratio (workflow speed / independent speed): {statistics.median(ratios):.2f}")
    if args.waits <= 0:  # --waits 0 measures the drains alone
        return 0
    latencies, lags = (sorted(values) for values in wait_latencies(args.dsn, args.waits, logs))
    how = "polling" if args.wait_poll else "LISTEN/NOTIFY"
    wakes = sorted(wake_latencies(args.dsn, min(args.waits, 100)))
    for what, values in (
        ("commit -> return", latencies),
        ("task's end -> return", lags),
        ("an end's commit -> return, no worker", wakes),
    ):
        p50 = statistics.median(values) * 1000
        p95 = values[int(len(values) * 0.95) - 1] * 1000
        print(
            f"wait_for_task ({how}), {what} ({len(values)} tasks): "
            f"p50 {p50:.1f} ms, p95 {p95:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
