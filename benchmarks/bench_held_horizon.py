"""A steady stream under a held horizon (PostgreSQL), per minute: does the drain decay?

Another session holds a REPEATABLE READ snapshot for ``--minutes`` while tasks arrive at
``--rate`` per second (INSERT batches every 100 ms) and one worker process drains them.
Per minute it prints the tasks finished, the p50 and p99 latency from due to finished
(the attempts' own ``data_hora`` and ``finished_at``, one clock: the database's), and the
size of the table that holds the unfinished work (the queue table, or its hot partition).
After the snapshot ends it waits one vacuum-service cycle and prints that size again.

The issue's target (issue 39): minute 9's drain and p99 at least 0.8x of minute 1's,
and the hot table back to its start size within one maintenance cycle.

    .venv/bin/python benchmarks/bench_held_horizon.py --minutes 10 --rate 500 --layout partitioned
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import DEFAULT_DSN, connect, fresh_queue, running_workers  # noqa: E402

VACUUM_INTERVAL = 10.0


def enqueue(dsn: str, table: str, rate: int, stop: threading.Event) -> None:
    per_tick = max(1, rate // 10)
    with connect(dsn, autocommit=True) as conn:
        next_tick = time.monotonic()
        while not stop.is_set():
            conn.execute(
                f"INSERT INTO {table} (processo, payload) "
                "SELECT 'bench', '{}' FROM generate_series(1, %s)",
                (per_tick,),
            )
            next_tick += 0.1
            stop.wait(max(0.0, next_tick - time.monotonic()))


def minute_stats(conn, table: str, since: float, until: float) -> tuple[int, float, float]:
    row = conn.execute(
        f"SELECT count(*), "
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - data_hora)), "
        "percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - data_hora)) "
        f"FROM {table} WHERE status = 'sucesso' "
        "AND finished_at >= to_timestamp(%s) AND finished_at < to_timestamp(%s)",
        (since, until),
    ).fetchone()
    return int(row[0]), float(row[1] or 0) * 1000, float(row[2] or 0) * 1000


def hot_size(conn, table: str, partitioned: bool) -> int:
    hot = f"{table}_hot" if partitioned else table
    return int(conn.execute("SELECT pg_total_relation_size(%s)", (hot,)).fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--layout", choices=("plain", "partitioned"), default="partitioned")
    args = parser.parse_args()
    partitioned = args.layout == "partitioned"
    env = {"QUEUE_VACUUM_INTERVAL": str(VACUUM_INTERVAL), "QUEUE_VACUUM_DEAD_ROWS": "10000"}
    with fresh_queue(args.dsn, args.layout) as name, tempfile.TemporaryDirectory() as logs:
        table = f"public.{name}"
        admin = connect(args.dsn, autocommit=True)
        start_size = hot_size(admin, table, partitioned)
        with running_workers(args.dsn, name, 1, 2, Path(logs), env):
            holder = connect(args.dsn)
            holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            holder.execute(f"SELECT count(*) FROM {table}").fetchone()
            stop = threading.Event()
            feeder = threading.Thread(target=enqueue, args=(args.dsn, table, args.rate, stop))
            feeder.start()
            print(f"{args.layout}: {args.rate} tasks/s for {args.minutes} min, snapshot held")
            print("minute  finished  p50 ms   p99 ms   hot table")
            began = time.time()
            try:
                for minute in range(args.minutes):
                    end = began + 60 * (minute + 1)
                    time.sleep(max(0.0, end - time.time()))
                    done, p50, p99 = minute_stats(admin, table, end - 60, end)
                    size = hot_size(admin, table, partitioned)
                    print(
                        f"{minute + 1:6d}  {done:8d}  {p50:7.1f}  {p99:7.1f}  {size / 1e6:6.1f} MB",
                        flush=True,
                    )
            finally:
                stop.set()
                feeder.join()
                holder.rollback()
                holder.close()
            time.sleep(VACUUM_INTERVAL * 2)
            after = hot_size(admin, table, partitioned)
            print(
                f"after the snapshot and one vacuum cycle: hot table {after / 1e6:.1f} MB "
                f"(start {start_size / 1e6:.1f} MB)"
            )
        admin.close()


if __name__ == "__main__":
    main()
