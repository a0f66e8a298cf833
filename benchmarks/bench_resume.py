"""A resumed processo's first claim against the queue's wake-up latency (issue 43's target).

    .venv/bin/python benchmarks/bench_resume.py                  # both databases, ~2 min
    .venv/bin/python benchmarks/bench_resume.py --only postgres --pairs 20

One idle worker process (QUEUE_CONCURRENCY=1, a no-op handler that appends its start
time to a file) on a fresh queue of each database; then ``--pairs`` paired samples, in
alternating order within the pair (this VM's speed drifts, so each comparison is made
within a pair), each after a random pause of 0.05-0.6 s (so that MariaDB's poll is met
at any point of its interval):

- **wake-up**: one task enqueued in its own transaction; latency = the handler's start
  minus the return of the enqueue's commit (the queue's ordinary wake-up: a NOTIFY on
  PostgreSQL, the dispatcher's poll on MariaDB);
- **resume**: the processo paused (committed), one task of it enqueued, held for
  ``--hold`` seconds (the benchmark fails if it starts then), then resumed; latency =
  the handler's start minus the return of the resume's commit.

The target: a resumed processo's first claim comes within the queue's wake-up latency,
so the ratio resume / wake-up of the medians is about 1. MariaDB is measured at the
default ``QUEUE_POLL_INTERVAL`` (0.5 s) and at 0.1 s.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_mysql
from bench_mysql import BenchError, Database, percentile, running_workers

PROCESSO = "noop"
START_TIMEOUT = 30.0


class StartLog:
    """The worker's start stamps (``task_id time``), read as they are appended."""

    def __init__(self, path: Path):
        self.path = path

    def started(self, task_id: int) -> float | None:
        if not self.path.exists():
            return None
        for line in self.path.read_text().splitlines():
            tid, stamp = line.split()
            if int(tid) == task_id:
                return float(stamp)
        return None

    def wait(self, task_id: int, workers) -> float:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            stamp = self.started(task_id)
            if stamp is not None:
                return stamp
            for proc in workers.procs:
                if proc.poll() is not None:
                    raise BenchError(f"the worker exited ({proc.returncode})")
            if time.monotonic() > deadline:
                raise BenchError(f"task {task_id} did not start within {START_TIMEOUT:g} s")
            time.sleep(0.002)


def enqueue(client, conn, key: str) -> int:
    task_id = client.insert_task(
        origem="bench", destino="bench", processo=PROCESSO, chave_externa=key, payload={}
    )
    conn.commit()
    return task_id


def wake_up_sample(client, conn, log: StartLog, workers, n: int) -> float:
    task_id = enqueue(client, conn, f"w{n}")
    committed = time.time()
    return log.wait(task_id, workers) - committed


def resume_sample(client, conn, log: StartLog, workers, n: int, hold: float) -> float:
    client.pause(PROCESSO)
    conn.commit()
    task_id = enqueue(client, conn, f"r{n}")
    time.sleep(hold)
    if log.started(task_id) is not None:
        raise BenchError(f"task {task_id} started while its processo was paused")
    client.resume(PROCESSO)
    conn.commit()
    committed = time.time()
    return log.wait(task_id, workers) - committed


def measure(db: Database, extra: dict[str, str], pairs: int, hold: float, log_dir: Path) -> dict:
    from nsj_queue_lib import QueueClient

    with db.fresh_queue() as table:
        path = log_dir / f"{table}.starts"
        log = StartLog(path)
        env = {"QUEUE_CONCURRENCY": "1", "BENCH_LATENCY_FILE": str(path), **extra}
        wake: list[float] = []
        resume: list[float] = []
        with running_workers(db, table, 1, env, log_dir) as workers:
            conn = db.connect()
            try:
                client = QueueClient(conn, table)
                wake_up_sample(client, conn, log, workers, -1)  # warm-up, not counted
                for n in range(pairs):
                    for kind in ("wake", "resume") if n % 2 == 0 else ("resume", "wake"):
                        # A random phase against the dispatcher's poll (MariaDB): fixed
                        # steps would meet it at the same point of its interval each time.
                        time.sleep(random.uniform(0.05, 0.6))
                        if kind == "wake":
                            wake.append(wake_up_sample(client, conn, log, workers, n))
                        else:
                            resume.append(resume_sample(client, conn, log, workers, n, hold))
            finally:
                conn.close()
        if any(code != 0 for code in workers.exit_codes):
            raise BenchError(f"worker exit codes {workers.exit_codes} after SIGTERM")
    ratios = [r / w for r, w in zip(resume, wake, strict=True) if w > 0]
    return {
        "wake_ms": [s * 1000 for s in wake],
        "resume_ms": [s * 1000 for s in resume],
        "pair_ratios": ratios,
    }


def summary(ms: list[float]) -> str:
    return f"p50 {percentile(ms, 50):7.1f}  p95 {percentile(ms, 95):7.1f}  max {max(ms):7.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    bench_mysql.add_database_options(parser)
    parser.add_argument("--pairs", type=int, default=30, help="paired samples (default 30)")
    parser.add_argument(
        "--hold", type=float, default=0.3, help="seconds a paused task is held (default 0.3)"
    )
    args = parser.parse_args(argv)
    variants: list[tuple[str, Database, dict[str, str]]] = []
    for db, _dialect in bench_mysql.chosen_databases(args):
        if db.kind == "postgres":
            variants.append((db.label, db, {}))
        else:
            for poll in bench_mysql.MARIADB_POLLS:
                variants.append(
                    (f"{db.label}, poll {poll:g} s", db, bench_mysql.mariadb_poll(poll))
                )
    log_dir = Path(tempfile.mkdtemp(prefix="nsj_bench_resume_"))
    print(f"bench_resume: {args.pairs} pairs, paused tasks held {args.hold:g} s; latencies in ms")
    try:
        for label, db, extra in variants:
            result = measure(db, extra, args.pairs, args.hold, log_dir)
            ratio = statistics.median(result["resume_ms"]) / statistics.median(result["wake_ms"])
            print(f"\n{label}")
            print(f"  wake-up (enqueue -> start)  {summary(result['wake_ms'])}")
            print(f"  resume  (resume -> start)   {summary(result['resume_ms'])}")
            print(
                f"  resume / wake-up: medians {ratio:.2f}; "
                f"per pair median {statistics.median(result['pair_ratios']):.2f}"
            )
    finally:
        for f in log_dir.iterdir():
            f.unlink()
        log_dir.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
