"""The vacuum service against none: the same drains, round after round, two queues side by side.

    .venv/bin/python benchmarks/bench_vacuum.py --rounds 8 --count 20000

PostgreSQL only (``BENCH_PG_DSN``, default ``host=127.0.0.1 user=postgres dbname=test``).
Two fresh queues, each with one worker process (QUEUE_CONCURRENCY=2): queue "off" runs
with QUEUE_VACUUM_DEAD_ROWS=0 (no vacuum service), queue "on" with the service
(QUEUE_VACUUM_INTERVAL=2, QUEUE_VACUUM_DEAD_ROWS=10000). Each round enqueues COUNT
tasks on each queue and times each drain, the two back to back in alternating order;
the on/off ratio is taken within the round (this VM's speed drifts by tens of percent
within minutes). Nothing is purged: the tables keep their history, as a busy queue's
does for QUEUE_PURGE_MAX_AGE days. Prints each round's rates and the dead row versions
each table holds after it (pg_stat_user_tables), then the medians.

What it shows depends on the server's autovacuum: where it is off (as on the machine
the numbers in docs/benchmarks.md come from), nothing but the service removes dead
versions.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_mysql import POLL_SECONDS, Database, running_workers, task_rows

from nsj_queue_lib import QueueClient

DSN = os.environ.get("BENCH_PG_DSN", "host=127.0.0.1 user=postgres dbname=test")
SIDES = {
    "off": {"QUEUE_VACUUM_DEAD_ROWS": "0"},
    "on": {"QUEUE_VACUUM_DEAD_ROWS": "10000", "QUEUE_VACUUM_INTERVAL": "2"},
}


def drain(db: Database, table: str, count: int) -> float:
    """Enqueue ``count`` tasks in one transaction; tasks per second until all are done."""
    conn = db.connect(autocommit=False)
    poll = db.connect(autocommit=True)
    try:
        ids = QueueClient(conn, table).insert_tasks(task_rows(count))
        conn.commit()
        started = time.perf_counter()
        sql = f"SELECT count(*) FROM {table} WHERE id BETWEEN %s AND %s AND status = 'sucesso'"
        while db.execute(poll, sql, (ids[0], ids[-1]))[0][0] < count:
            if time.perf_counter() - started > 600:
                raise RuntimeError(f"{table}: the drain did not end in 600 s")
            time.sleep(POLL_SECONDS)
        return count / (time.perf_counter() - started)
    finally:
        conn.close()
        poll.close()


def dead_rows(db: Database, table: str) -> int:
    conn = db.connect(autocommit=True)
    try:
        sql = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = to_regclass(%s)"
        return int(db.execute(conn, sql, (table,))[0][0])
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--count", type=int, default=20_000)
    args = parser.parse_args()
    db = Database("postgres", DSN)
    ratios: list[float] = []
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    with contextlib.ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        tables = {}
        for side, extra in SIDES.items():
            tables[side] = stack.enter_context(db.fresh_queue())
            stack.enter_context(
                running_workers(db, tables[side], 1, {"QUEUE_CONCURRENCY": "2", **extra}, logs)
            )
        for round_number in range(1, args.rounds + 1):
            order = list(SIDES) if round_number % 2 else list(reversed(SIDES))
            got = {side: drain(db, tables[side], args.count) for side in order}
            for side in SIDES:
                rates[side].append(got[side])
            ratios.append(got["on"] / got["off"])
            dead = {side: dead_rows(db, tables[side]) for side in SIDES}
            print(
                f"round {round_number}: off {got['off']:,.0f}/s ({dead['off']:,} dead) "
                f"on {got['on']:,.0f}/s ({dead['on']:,} dead) ratio {ratios[-1]:.3f}",
                flush=True,
            )
    half = len(ratios) // 2
    print(
        f"\nmedian rate: off {statistics.median(rates['off']):,.0f}/s, "
        f"on {statistics.median(rates['on']):,.0f}/s; on/off median {statistics.median(ratios):.3f}"
        f" (first half {statistics.median(ratios[:half] or ratios):.3f}, "
        f"second half {statistics.median(ratios[half:]):.3f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
