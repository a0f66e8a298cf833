"""graphile-worker (npm, pinned in ``graphile/package.json``) on the benchmarks' PostgreSQL.

These are the comparison rows issue 40 asks for. ``benchmarks/graphile/runner.js`` is a
worker process with one no-op task. Its options come from ``GW_*`` variables: ``BEST`` is
graphile-worker's documented performance configuration, ``DEFAULTS`` its defaults. The
harness starts it as it starts our workers and pgqueuer's.

    .venv/bin/python benchmarks/graphile.py --tasks 5000      # one burst, one backlog, latency

Node.js and npm come from the machine; ``install()`` runs ``npm install`` once into
``benchmarks/graphile/node_modules`` (the npm registry). Where either is missing,
``unavailable()`` says why, and the callers skip graphile-worker's rows with that message.
graphile-worker's jobs live in the schema ``graphile_worker``, dropped and migrated
afresh for every measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import stop_processes, worker_ticks  # noqa: E402 - the harness next to this file

RUNNER_DIR = HERE / "graphile"
VERSION = "0.18.0"
SCHEMA = "graphile_worker"
# graphile-worker's performance configuration (its docs) and its defaults.
BEST = dict(
    GW_CONCURRENCY="24",
    GW_MAX_POOL_SIZE="25",
    GW_LOCAL_QUEUE="500",
    GW_COMPLETE_DELAY="0",
    GW_FAIL_DELAY="0",
)
DEFAULTS: dict[str, str] = {}
POLL = 0.01


def unavailable() -> str | None:
    """Why graphile-worker cannot run here (None: it can)."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH: graphile-worker's rows are skipped"
    return None


def install() -> None:
    """graphile-worker at the pinned version, once."""
    marker = RUNNER_DIR / "node_modules" / "graphile-worker" / "package.json"
    if marker.exists() and f'"version": "{VERSION}"' in marker.read_text():
        return
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=RUNNER_DIR,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def url(dsn: str) -> str:
    """A libpq keyword DSN as the postgres:// URL node-postgres takes."""
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(dsn)
    auth = info.get("user", "postgres") + (f":{info['password']}" if info.get("password") else "")
    host, port = info.get("host", "127.0.0.1"), info.get("port", "5432")
    return f"postgres://{auth}@{host}:{port}/{info.get('dbname', 'postgres')}"


def _env(dsn: str, config: dict[str, str]) -> dict[str, str]:
    return dict(os.environ, GW_DSN=url(dsn), **config)


def reset(dsn: str) -> None:
    """graphile-worker's schema, dropped and made again (no job, no worker left)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    subprocess.run(
        ["node", str(RUNNER_DIR / "runner.js"), "migrate"],
        env=_env(dsn, {}),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def add_jobs(conn, count: int, first: int = 0) -> None:
    """``count`` no-op jobs in one statement (graphile-worker's batch add_jobs), committed
    by the caller; payload ``{"n": first + i}``."""
    conn.execute(
        f"SELECT {SCHEMA}.add_jobs(ARRAY(SELECT ROW('noop', json_build_object('n', g), "
        f"NULL, NULL, NULL, NULL, NULL, NULL)::{SCHEMA}.job_spec "
        "FROM generate_series(%s::int, %s::int) AS g))",
        (first, first + count - 1),
    )


def remaining(conn) -> int:
    return int(conn.execute(f"SELECT count(*) FROM {SCHEMA}._private_jobs").fetchone()[0])


@contextlib.contextmanager
def workers(
    dsn: str,
    processes: int,
    config: dict[str, str],
    log_dir: Path,
    latency_file: Path | None = None,
    wait_ready: bool = True,
) -> Iterator[list[subprocess.Popen]]:
    """``processes`` graphile-worker processes; with ``wait_ready``, once each says it runs."""
    env = _env(dsn, config)
    if latency_file is not None:
        env["GW_LATENCY_FILE"] = str(latency_file)
    procs: list[subprocess.Popen] = []
    logs = [log_dir / f"graphile.{time.monotonic_ns()}.{i}.log" for i in range(processes)]
    with contextlib.ExitStack() as files:
        try:
            for log in logs:
                procs.append(
                    subprocess.Popen(
                        ["node", str(RUNNER_DIR / "runner.js")],
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=files.enter_context(open(log, "wb")),
                    )
                )
            deadline = time.monotonic() + 30
            while wait_ready and not all(
                log.exists() and b"graphile-worker running" in log.read_bytes() for log in logs
            ):
                if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                    raise RuntimeError(f"a graphile-worker process did not start: {logs[0]}")
                time.sleep(0.02)
            yield procs
        finally:
            stop_processes(procs, 30)


def drain(
    dsn: str, processes: int, config: dict[str, str], total: int, log_dir: Path, backlog: bool
) -> tuple[float, float, int]:
    """(jobs/s wall, jobs/s after the first job, the workers' CPU ticks) of ``total`` no-op
    jobs. Burst: committed at once for workers already running, timed (and their CPU
    counted) from the commit. Backlog: committed first, then the workers started, timed
    from their start (the ticks are their whole life's, start-up included)."""
    import psycopg

    reset(dsn)
    with psycopg.connect(dsn, autocommit=True) as poll:
        if backlog:
            add_jobs(poll, total)
            t0 = time.perf_counter()
            context = workers(dsn, processes, config, log_dir, wait_ready=False)
        else:
            context = workers(dsn, processes, config, log_dir)
        with context as procs:
            pids = [p.pid for p in procs]
            ticks = 0
            if not backlog:
                ticks = worker_ticks(pids)
                add_jobs(poll, total)
                t0 = time.perf_counter()
            first_at = None
            while True:
                left = remaining(poll)
                now = time.perf_counter()
                if left < total and first_at is None:
                    first_at = now
                if left == 0:
                    break
                if now - t0 > 600:
                    raise RuntimeError(f"graphile-worker: {left} of {total} jobs left after 600 s")
                time.sleep(POLL)
            ticks = worker_ticks(pids) - ticks
    return total / (now - t0), (total - 1) / max(now - (first_at or t0), 1e-6), ticks


def latency(
    dsn: str, config: dict[str, str], log_dir: Path, count: int, rate: float, warmup: int
) -> list[float]:
    """Milliseconds from each job's commit to its start, one job per transaction at
    ``rate``/s for one worker process (the first ``warmup`` left out)."""
    import psycopg

    reset(dsn)
    latency_file = log_dir / f"graphile.{time.monotonic_ns()}.latency"
    committed: dict[int, float] = {}
    with workers(dsn, 1, config, log_dir, latency_file):
        with psycopg.connect(dsn, autocommit=True) as conn:
            start = time.perf_counter() + 1.0 / rate
            for n in range(count + warmup):
                pause = start + n / rate - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                add_jobs(conn, 1, n)
                committed[n] = time.time()
        deadline = time.monotonic() + 10
        while len(latency_file.read_text().splitlines()) < count + warmup:
            if time.monotonic() > deadline:
                raise RuntimeError("graphile-worker did not start every job")
            time.sleep(0.05)
    started = {}
    for line in latency_file.read_text().splitlines():
        n, at = line.split()
        started.setdefault(int(n), float(at))
    return [(started[n] - committed[n]) * 1000 for n in sorted(committed)[warmup:]]


def main(argv: list[str] | None = None) -> int:
    import statistics

    parser = argparse.ArgumentParser(description="graphile-worker alone: a smoke of its rows")
    parser.add_argument(
        "--dsn", default=os.environ.get("BENCH_PG_DSN", "host=127.0.0.1 user=postgres dbname=test")
    )
    parser.add_argument("--tasks", type=int, default=5000)
    args = parser.parse_args(argv)
    reason = unavailable()
    if reason:
        print(reason)
        return 0
    install()
    with tempfile.TemporaryDirectory(prefix="nsjq-graphile-") as tmp:
        log_dir = Path(tmp)
        for label, config, processes in (("best", BEST, 1), ("defaults", DEFAULTS, 1)):
            for backlog in (False, True):
                wall, after, _ = drain(args.dsn, processes, config, args.tasks, log_dir, backlog)
                scenario = "backlog" if backlog else "burst"
                print(
                    f"graphile-worker {label:8} {scenario:7} {wall:8,.0f}/s  after the first {after:8,.0f}/s"
                )
        values = latency(args.dsn, BEST, log_dir, 200, 50.0, 20)
        cuts = statistics.quantiles(values, n=100)
        print(
            f"graphile-worker latency p50 {statistics.median(values):.2f} ms, p95 {cuts[94]:.2f}, p99 {cuts[98]:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
