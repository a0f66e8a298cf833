"""Async handlers (issue 18): no-op ``async def`` drain vs the sync default drain, and 50 ms
of awaited I/O at QUEUE_CONCURRENCY=100.

    .venv/bin/python benchmarks/bench_async.py                  # 5 rounds, ~1 minute
    .venv/bin/python benchmarks/bench_async.py --rounds 3 --tasks 2000

(1) one worker process at default settings (QUEUE_CONCURRENCY=1) drains
    ``--tasks`` no-op tasks, once with the sync ``execute`` and once with the
    same handler declared ``async def``, back to back in alternating order;
    the async/sync ratio is taken within each round and the median reported
    (this VM's speed drifts within minutes).
(2) one worker process whose ``async def`` handler awaits
    ``asyncio.sleep(0.05)``, QUEUE_CONCURRENCY=100 and QUEUE_POOL_SIZE=``--pool``
    (default 70: at 50 ms a task, 1,000 tasks/s need at least 50 transactions
    open at once, each on its own connection); the rate of ``--tasks`` tasks.
    Target: at least 1,000 tasks/s.

The database is ``BENCH_PG_DSN`` (default ``host=127.0.0.1 user=postgres dbname=test``);
each drain runs on a fresh queue table dropped after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    DEFAULT_DSN,
    connect,
    fresh_queue,
    running_workers,
    task_rows,
    wait_succeeded,
)

from nsj_queue_lib import QueueClient

SLEEP_SECONDS = 0.05
TARGET_SLEEPING_RATE = 1000.0


def drain(dsn: str, tasks: int, concurrency: int, env: dict[str, str], logs: Path) -> float:
    """Tasks per second of one worker process draining ``tasks`` tasks inserted at once."""
    with fresh_queue(dsn) as queue:
        with (
            running_workers(dsn, queue, 1, concurrency, logs, env),
            connect(dsn, autocommit=True) as poll,
            connect(dsn) as conn,
        ):
            ids = QueueClient(conn, f"public.{queue}").insert_tasks(task_rows(tasks))
            conn.commit()
            t0 = time.perf_counter()
            seconds = wait_succeeded(poll, queue, ids[0], ids[-1], tasks, t0, 300)
    return tasks / seconds


def paired_noop(dsn: str, rounds: int, tasks: int, logs: Path) -> None:
    sides = {"sync": {}, "async": {"BENCH_HANDLER": "async"}}
    rates: dict[str, list[float]] = {"sync": [], "async": []}
    ratios = []
    for round_number in range(rounds):
        order = ["sync", "async"] if round_number % 2 == 0 else ["async", "sync"]
        measured = {side: drain(dsn, tasks, 1, sides[side], logs) for side in order}
        for side, rate in measured.items():
            rates[side].append(rate)
        ratios.append(measured["async"] / measured["sync"])
        print(
            f"  round {round_number + 1}: sync {measured['sync']:7.0f}/s  "
            f"async {measured['async']:7.0f}/s  ratio {ratios[-1]:.2f}",
            flush=True,
        )
    print(
        f"(1) no-op drain, 1 process x QUEUE_CONCURRENCY=1, {tasks} tasks, {rounds} rounds: "
        f"sync median {statistics.median(rates['sync']):.0f}/s, "
        f"async median {statistics.median(rates['async']):.0f}/s, "
        f"async/sync median ratio {statistics.median(ratios):.2f} "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
    )


def sleeping(dsn: str, runs: int, tasks: int, pool: int, logs: Path) -> None:
    env = {
        "BENCH_HANDLER": "async",
        "BENCH_ASYNC_SLEEP": str(SLEEP_SECONDS),
        "QUEUE_POOL_SIZE": str(pool),
    }
    rates = []
    for run in range(runs):
        rates.append(drain(dsn, tasks, 100, env, logs))
        print(f"  run {run + 1}: {rates[-1]:7.0f}/s", flush=True)
    median = statistics.median(rates)
    verdict = "met" if median >= TARGET_SLEEPING_RATE else "NOT met"
    print(
        f"(2) async handler awaiting {SLEEP_SECONDS * 1000:.0f} ms, 1 process, "
        f"QUEUE_CONCURRENCY=100, QUEUE_POOL_SIZE={pool}, {tasks} tasks: median {median:.0f}/s "
        f"(min {min(rates):.0f}, max {max(rates):.0f}); target >= {TARGET_SLEEPING_RATE:.0f}/s "
        f"{verdict}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds of (1)")
    parser.add_argument("--tasks", type=int, default=3000, help="tasks per drain")
    parser.add_argument("--pool", type=int, default=70, help="QUEUE_POOL_SIZE of (2)")
    parser.add_argument("--runs", type=int, default=3, help="runs of (2)")
    args = parser.parse_args()
    dsn = os.environ.get("BENCH_PG_DSN", DEFAULT_DSN)
    with tempfile.TemporaryDirectory(prefix="nsjq-bench-async-") as logs:
        paired_noop(dsn, args.rounds, args.tasks, Path(logs))
        sleeping(dsn, args.runs, args.tasks, args.pool, Path(logs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
