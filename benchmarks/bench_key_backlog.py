"""What one claim costs when a single lock key holds the backlog (a busy process's calls).

One session calls the claim function (claim_function.sql) in a loop, settling the task
it claimed before and claiming the next in the same call, on a fresh queue whose
``--tasks`` rows all share one lock_key: only the key's head is claimable at each call.
Printed: the mean time of a call in each fifth of the drain, for each backlog size, so
that a claim whose walk grows with the key's backlog shows as times that grow with
``--tasks`` and fall as the queue drains.

    .venv/bin/python benchmarks/bench_key_backlog.py [--tasks 300 1000 3000] [--limit 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import connect, fresh_queue, task_rows  # noqa: E402
from bench_mysql import DEFAULT_PG_DSN  # noqa: E402

from nsj_queue_lib import QueueClient  # noqa: E402
from nsj_queue_lib.db.dialect import DdlNames  # noqa: E402

FIFTHS = 5


def drain_one_key(dsn: str, tasks: int, limit: int) -> list[float]:
    """Mean seconds of a claim-and-settle call in each fifth of the drain."""
    with fresh_queue(dsn) as queue, connect(dsn) as conn:
        claim = DdlNames("public", queue).object_names()["claim_function"]
        rows = [{**row, "lock_key": "one"} for row in task_rows(tasks)]
        QueueClient(conn, f"public.{queue}").insert_tasks(rows)
        conn.commit()
        sql = f"SELECT (task).id FROM {claim}(%s, NULL, 1, 0, %s, NULL, NULL, 'bench')"
        done, times = None, []
        while True:
            started = time.perf_counter()
            claimed = conn.execute(sql, (done, limit)).fetchall()
            conn.commit()
            times.append(time.perf_counter() - started)
            if not claimed:
                break
            done = claimed[0][0]
        share = max(1, len(times) // FIFTHS)
        return [sum(times[i * share : (i + 1) * share]) / share for i in range(FIFTHS)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_PG_DSN)
    parser.add_argument("--tasks", type=int, nargs="+", default=[300, 1000, 3000])
    parser.add_argument("--limit", type=int, default=20, help="the claim's limit (a group)")
    args = parser.parse_args()
    for tasks in args.tasks:
        means = drain_one_key(args.dsn, tasks, args.limit)
        print(f"{tasks} tasks of one key: " + " / ".join(f"{m * 1000:.2f}" for m in means), end="")
        print(" ms a call, by fifth of the drain")
    return 0


if __name__ == "__main__":
    sys.exit(main())
