"""Per-processo limits, measured (issue 19): rate_limit, interval_s, max_concurrent.

    .venv/bin/python benchmarks/bench_limits.py --rounds 3

Real worker processes (4 x 4 executors) on one queue, PostgreSQL and MariaDB:
- ``rate_limit="50/s"``: a backlog larger than 30 s of starts; over the 30 s
  from the first start, the starts per second and the most starts in any
  1-second window (issue: within 5% of 50, never above 55);
- ``interval_s=(0.2, 0.4)``: 35 tasks; every gap between consecutive starts
  across the cluster (issue: all inside [0.2, 0.4] s);
- ``max_concurrent=3``: 200 tasks of 50 ms; the 'processando' rows of the
  processo sampled from the table every 5 ms (issue: never above 3, and the
  drain uses all 3: the share of samples at 3 and the drain's rate against
  the cap's ideal of 3 / 50 ms = 60 tasks/s).
Start times are the handlers' (``time.time()`` appended to a file per
process). Each round measures every case on every database; rows are medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_mysql  # found through the path entry above

HERE = Path(__file__).resolve()
PROCESSES, EXECUTORS = 4, 4
RATE, RATE_SECONDS = 50, 30.0
INTERVAL, INTERVAL_TASKS = (0.2, 0.4), 35
CAP, CAPPED_TASKS, CAPPED_SLEEP = 3, 200, 0.05


def worker_main() -> None:
    from nsj_queue_lib import Task, WorkerBase

    starts = os.open(os.environ["BENCH_STARTS_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def record(tarefa) -> None:
        os.write(starts, f"{tarefa['processo']} {time.time():.6f}\n".encode())

    class LimitsWorker(WorkerBase):
        @Task("rated", rate_limit=f"{RATE}/s")
        def rated(self, payload, tarefa, bd_conn):
            record(tarefa)

        @Task("spaced", interval_s=INTERVAL)
        def spaced(self, payload, tarefa, bd_conn):
            record(tarefa)

        @Task("capped", max_concurrent=CAP)
        def capped(self, payload, tarefa, bd_conn):
            record(tarefa)
            time.sleep(CAPPED_SLEEP)

    worker = LimitsWorker()
    ready_path = os.environ["BENCH_READY_FILE"]

    def signal_ready() -> None:
        while True:
            runtime = worker._runtime
            if runtime is not None and runtime.dispatcher._control is not None:
                Path(ready_path).write_text(str(os.getpid()))
                return
            time.sleep(0.01)

    threading.Thread(target=signal_ready, daemon=True).start()
    worker.run()


def read_starts(path: Path, processo: str) -> list[float]:
    if not path.exists():
        return []
    lines = (line.split() for line in path.read_text().splitlines())
    return sorted(float(t) for p, t in lines if p == processo)


def run_case(db, logs: Path, processo: str, count: int, until) -> tuple[list[float], list[int]]:
    """Enqueue ``count`` tasks of ``processo`` for running workers; wait until ``until(starts)``.
    Returns the start times and the sampled counts of its 'processando' rows."""
    from nsj_queue_lib import QueueClient

    starts_file = logs / f"starts.{time.monotonic_ns()}"
    env = {"QUEUE_CONCURRENCY": str(EXECUTORS), "BENCH_STARTS_FILE": str(starts_file)}
    samples: list[int] = []
    with (
        db.fresh_queue() as table,
        bench_mysql.running_workers(db, table, PROCESSES, env, logs, script=HERE),
    ):
        conn = db.connect()
        QueueClient(conn, table).insert_tasks(
            [dict(origem="b", destino="b", processo=processo, chave_externa=None, payload="x")]
            * count
        )
        conn.commit()
        conn.close()
        poll = db.connect(autocommit=True)
        sql = f"SELECT count(*) FROM {table} WHERE processo = %s AND status = 'processando'"
        deadline = time.monotonic() + 180
        try:
            while not until(read_starts(starts_file, processo)):
                if time.monotonic() > deadline:
                    raise bench_mysql.BenchError(f"{processo}: not done after 180 s")
                samples.append(int(db.execute(poll, sql, (processo,))[0][0]))
                time.sleep(0.005)
        finally:
            poll.close()
    return read_starts(starts_file, processo), samples


def rate_case(db, logs: Path) -> tuple[float, int]:
    """(starts/s over RATE_SECONDS, most starts in any 1-s window)."""

    def enough(starts: list[float]) -> bool:
        return bool(starts) and time.time() > starts[0] + RATE_SECONDS + 0.5

    starts, _ = run_case(db, logs, "rated", int(RATE * (RATE_SECONDS + 6)), enough)
    first = starts[0]
    inside = [t for t in starts if t < first + RATE_SECONDS]
    j, most = 0, 0
    for i, t in enumerate(inside):
        while j < len(inside) and inside[j] < t + 1.0:
            j += 1
        most = max(most, j - i)
    return len(inside) / RATE_SECONDS, most


def interval_case(db, logs: Path) -> tuple[float, float, int]:
    """(shortest gap, longest gap, gaps outside the range)."""
    starts, _ = run_case(db, logs, "spaced", INTERVAL_TASKS, lambda s: len(s) >= INTERVAL_TASKS)
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    # 1 ms for the clocks and the handler's start after the claim.
    outside = sum(1 for g in gaps if not INTERVAL[0] - 0.001 <= g <= INTERVAL[1] + 0.001)
    return min(gaps), max(gaps), outside


def capped_case(db, logs: Path) -> tuple[int, float, float]:
    """(most running sampled, share of samples at the cap, drain rate / ideal)."""
    starts, samples = run_case(db, logs, "capped", CAPPED_TASKS, lambda s: len(s) >= CAPPED_TASKS)
    busy = samples[2:-2] or samples  # the drain itself, not its first and last polls
    elapsed = starts[-1] - starts[0] + CAPPED_SLEEP
    ideal = CAP / CAPPED_SLEEP
    return (
        max(samples),
        sum(1 for s in busy if s == CAP) / len(busy),
        CAPPED_TASKS / elapsed / ideal,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--pg-dsn",
        default=os.environ.get("BENCH_PG_DSN", "host=127.0.0.1 user=postgres dbname=test"),
    )
    parser.add_argument(
        "--mysql-dsn", default=os.environ.get("BENCH_MYSQL_DSN", "mysql://root:@127.0.0.1/test")
    )
    parser.add_argument("--only", choices=["postgres", "mariadb"])
    args = parser.parse_args(argv)
    databases = {
        "PostgreSQL": bench_mysql.Database("postgres", args.pg_dsn),
        "MariaDB": bench_mysql.Database("mariadb", args.mysql_dsn),
    }
    if args.only:
        databases = {k: v for k, v in databases.items() if v.kind == args.only}
    results: dict[str, dict[str, list[tuple]]] = {
        db: {"rate": [], "interval": [], "capped": []} for db in databases
    }
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        for round_number in range(args.rounds):
            for label, db in databases.items():
                got = results[label]
                got["rate"].append(rate_case(db, logs))
                got["interval"].append(interval_case(db, logs))
                got["capped"].append(capped_case(db, logs))
                (rate, most), (low, high, outside), (top, share, use) = (
                    got["rate"][-1],
                    got["interval"][-1],
                    got["capped"][-1],
                )
                print(
                    f"round {round_number + 1} {label}: rate {rate:.2f}/s (max {most} in 1 s); "
                    f"interval gaps {low:.3f}-{high:.3f} s ({outside} outside); "
                    f"max_concurrent max {top}, at cap {share:.0%}, drain {use:.0%} of ideal",
                    flush=True,
                )
    print()
    print(
        f"per-processo limits, {PROCESSES} processes x {EXECUTORS} executors, medians of {args.rounds}"
    )
    med = statistics.median
    for label in databases:
        r = results[label]
        print(
            f"{label:11} rate_limit=50/s: {med(x[0] for x in r['rate']):.2f} starts/s "
            f"over {RATE_SECONDS:.0f} s, max {med(x[1] for x in r['rate']):.0f} in any 1 s "
            f"(worst round {max(x[1] for x in r['rate'])})"
        )
        print(
            f"{'':11} interval_s=(0.2, 0.4): gaps {min(x[0] for x in r['interval']):.3f}-"
            f"{max(x[1] for x in r['interval']):.3f} s over all rounds, "
            f"{sum(x[2] for x in r['interval'])} outside"
        )
        print(
            f"{'':11} max_concurrent=3: max sampled {max(x[0] for x in r['capped'])}, "
            f"samples at 3 {med(x[1] for x in r['capped']):.0%}, "
            f"drain {med(x[2] for x in r['capped']):.0%} of 3 x 50 ms"
        )
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker_main()
    else:
        sys.exit(main())
