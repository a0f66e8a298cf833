"""Wake-up latency through the socket server (client/server mode) next to plain LISTEN.

    .venv/bin/python benchmarks/bench_server_wakeup.py               # ~15 s
    .venv/bin/python benchmarks/bench_server_wakeup.py --json        # one JSON object on stdout
    .venv/bin/python benchmarks/bench_server_wakeup.py --tasks 50 --rate 50 --warmup 5   # quick

The database is ``BENCH_PG_DSN`` (libpq conninfo, default
``host=127.0.0.1 user=postgres dbname=test``), or ``--dsn``.

For each mode, on a fresh queue made by ``nsj_queue_lib.db_gen.render``
(dropped afterwards), one idle worker process at QUEUE_CONCURRENCY=1 with a
no-op handler; ``--tasks`` tasks (default 200, after ``--warmup`` = 5 not
counted) are enqueued at ``--rate`` per second (default 50), one
``insert_task`` per transaction. Latency = handler start (``time.time()`` in
the worker, appended to a file) - commit return (``time.time()`` in the
enqueuer), same clock; the notification can beat the commit's reply to
the enqueuer, so ``min`` may be slightly negative.

- ``server``: ``python -m nsj_queue_lib.server`` on free loopback ports with a
  token, and the worker with ``CLIENT_SERVER_MODE=true``. The path is: commit
  -> the trigger's NOTIFY -> the server's LISTEN relay -> a push on the
  worker's notify connection -> the dispatcher -> an executor's claim, whose
  liveness lock is a round trip to the server's lock service -> handler.
  ``CHECK_TASKS_INTERVAL`` is left at its default (15 s): the poll plays no
  part in these numbers.
- ``listen``: the same worker in the default mode (LISTEN on PostgreSQL,
  advisory liveness locks).

Called from ``run_all.py``: ``measure(dsn, tasks, rate, warmup)`` returns
``{"server": {"p50": ms, "p95": .., "p99": .., "min": .., "max": ..},
"listen": {...}}``; ``main()`` prints a table. ``--worker`` is this script's
own worker process (internal).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_DSN = "host=127.0.0.1 user=postgres dbname=test"
READY_TIMEOUT = 30.0
FINISH_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0
MODES = ("server", "listen")


class BenchError(RuntimeError):
    pass


# -- the worker process (python bench_server_wakeup.py --worker) --------------------------------


def run_worker() -> int:
    from nsj_queue_lib import WorkerBase

    fd = os.open(os.environ["BENCH_LATENCY_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    class StampWorker(WorkerBase):
        def execute(self, payload, tarefa, bd_conn):
            os.write(fd, f"{tarefa['id']} {time.time():.6f}\n".encode())
            return None

    return StampWorker().run() or 0


# -- helpers ---------------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolation percentile (numpy's default, as in run_all.py)."""
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def db_env(dsn: str) -> dict[str, str]:
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(dsn)
    env = {
        "DB_DRIVER": "POSTGRES",
        "DB_HOST": str(info.get("host") or "127.0.0.1"),
        "DB_PORT": str(info.get("port") or 5432),
        "DB_BASE": str(info.get("dbname") or "postgres"),
        "DB_USER": str(info.get("user") or "postgres"),
    }
    if info.get("password"):
        env["DB_PASS"] = str(info["password"])
    return env


def base_env(dsn: str, queue: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            (
                "DB_",
                "DATABASE_",
                "QUEUE_",
                "LOG_",
                "GRAFANA_",
                "CLIENT_SERVER_MODE",
                "SERVER_HOST",
                "NOTIFY_SERVICE_PORT",
                "LOCK_SERVICE_PORT",
                "CHECK_TASKS_",
            )
        )
    }
    env.update(db_env(dsn))
    env.update(
        QUEUE_NAME=queue, QUEUE_TABLE=f"public.{queue}", LOG_DEBUG="false", PYTHONUNBUFFERED="1"
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return env


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def fresh_queue(dsn: str) -> Iterator[str]:
    import psycopg

    from benchmarks._harness import drop_queue_sql
    from nsj_queue_lib.db_gen import render

    name = f"bsw_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(render("public", name))
    try:
        yield name
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(drop_queue_sql("public", name))


class Process:
    """A child process with its output in a log file; SIGTERM on exit (SIGKILL if it hangs)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path):
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                args,
                env=env,
                cwd=str(ROOT),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def check_alive(self, what: str) -> None:
        if self.proc.poll() is not None:
            raise BenchError(
                f"{what} exited early with code {self.proc.returncode}:\n{tail(self.log)}"
            )

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def wait(condition, timeout: float, what: str, alive=()) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for proc, name in alive:
            proc.check_alive(name)
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


# -- one mode --------------------------------------------------------------------------------------


def measure_mode(
    dsn: str, mode: str, tasks: int, rate: float, warmup: int, log_dir: Path
) -> dict[str, float]:
    import psycopg

    from nsj_queue_lib.queue_client import QueueClient

    with fresh_queue(dsn) as queue:
        env = base_env(dsn, queue)
        lat_file = log_dir / f"{queue}.latency"
        server = None
        worker = None
        try:
            worker_env = dict(env, QUEUE_CONCURRENCY="1", BENCH_LATENCY_FILE=str(lat_file))
            if mode == "server":
                token = secrets.token_urlsafe(24)
                ports = {
                    "NOTIFY_SERVICE_PORT": str(free_port()),
                    "LOCK_SERVICE_PORT": str(free_port()),
                }
                server = Process(
                    [sys.executable, "-m", "nsj_queue_lib.server"],
                    dict(env, QUEUE_SERVER_TOKEN=token, QUEUE_SERVER_BIND="127.0.0.1", **ports),
                    log_dir / f"{queue}.server.log",
                )
                wait(
                    lambda: "server ready" in server.text(),
                    READY_TIMEOUT,
                    "the server to start",
                    [(server, "the server")],
                )
                worker_env.update(
                    CLIENT_SERVER_MODE="true",
                    SERVER_HOST="127.0.0.1",
                    QUEUE_SERVER_TOKEN=token,
                    **ports,
                )
            worker = Process(
                [sys.executable, str(Path(__file__).resolve()), "--worker"],
                worker_env,
                log_dir / f"{queue}.worker.log",
            )
            alive = [(worker, "the worker")] + ([(server, "the server")] if server else [])
            app = f"nsj_queue_lib:{queue}"[:63]
            with psycopg.connect(dsn, autocommit=True) as watch:

                def ready() -> bool:
                    sessions, listening = watch.execute(
                        "SELECT count(*), count(*) FILTER (WHERE query ILIKE 'LISTEN%%') "
                        "FROM pg_stat_activity WHERE application_name = %s",
                        (app,),
                    ).fetchone()
                    if (
                        sessions < 2
                    ):  # the pool's connection and the dispatcher's control connection
                        return False
                    if mode == "server":
                        text = server.text()  # the worker subscribed, the server LISTENs
                        return (
                            listening == 0
                            and f"subscribed to '{queue}'" in text
                            and "check-tasks: connected" in text
                        )
                    return listening == 1

                wait(ready, READY_TIMEOUT, f"the {mode} worker to be ready", alive)
            time.sleep(0.3)  # let the dispatcher reach its wait

            committed: dict[int, float] = {}
            order: list[int] = []
            interval = 1.0 / rate
            with psycopg.connect(dsn) as conn:
                client = QueueClient(conn, f"public.{queue}")
                start = time.perf_counter() + interval
                for i in range(warmup + tasks):
                    pause = start + i * interval - time.perf_counter()
                    if pause > 0:
                        time.sleep(pause)
                    task_id = client.insert_task(
                        origem="bench",
                        destino="bench",
                        processo="noop",
                        chave_externa=str(i),
                        payload={"n": i},
                    )
                    conn.commit()
                    committed[task_id] = time.time()
                    order.append(task_id)

            started: dict[int, float] = {}

            def all_started() -> bool:
                started.clear()
                if lat_file.exists():
                    for line in lat_file.read_text().splitlines():
                        tid, ts = line.split()
                        started[int(tid)] = float(ts)
                return len(started) >= len(order)

            wait(all_started, FINISH_TIMEOUT, f"{len(order)} tasks to start ({mode})", alive)
        finally:
            codes = {}
            if worker is not None:
                codes["worker"] = worker.stop()
            if server is not None:
                codes["server"] = server.stop()
        bad = {k: v for k, v in codes.items() if v != 0}
        if bad:
            raise BenchError(f"exit codes after SIGTERM: {bad} (expected 0)")
    lat_ms = [(started[t] - committed[t]) * 1000.0 for t in order[warmup:]]
    return {
        "p50": percentile(lat_ms, 50),
        "p95": percentile(lat_ms, 95),
        "p99": percentile(lat_ms, 99),
        "min": min(lat_ms),
        "max": max(lat_ms),
        "n": len(lat_ms),
    }


def measure(
    dsn: str | None = None,
    tasks: int = 200,
    rate: float = 50.0,
    warmup: int = 5,
    log_dir: Path | None = None,
    modes=MODES,
) -> dict[str, dict[str, float]]:
    """Latencies in ms for each mode: {"server": {...}, "listen": {...}}."""
    dsn = dsn or os.environ.get("BENCH_PG_DSN") or DEFAULT_DSN
    own_dir = log_dir is None
    log_dir = Path(tempfile.mkdtemp(prefix="nsj_bench_wakeup_")) if own_dir else Path(log_dir)
    try:
        return {mode: measure_mode(dsn, mode, tasks, rate, warmup, log_dir) for mode in modes}
    finally:
        if own_dir:
            for f in log_dir.iterdir():
                f.unlink()
            log_dir.rmdir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--dsn", help=f"PostgreSQL conninfo (default: BENCH_PG_DSN or {DEFAULT_DSN})"
    )
    parser.add_argument(
        "--tasks", type=int, default=200, help="measured tasks per mode (default 200)"
    )
    parser.add_argument(
        "--rate", type=float, default=50.0, help="tasks enqueued per second (default 50)"
    )
    parser.add_argument(
        "--warmup", type=int, default=5, help="tasks first, not counted (default 5)"
    )
    parser.add_argument(
        "--mode", choices=MODES, action="append", help="only this mode (repeatable)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the server's and workers' logs"
    )
    args = parser.parse_args(argv)
    if args.worker:
        return run_worker()
    if args.tasks < 1 or args.rate <= 0 or args.warmup < 0:
        parser.error("--tasks >= 1, --rate > 0, --warmup >= 0")

    log_dir = Path(tempfile.mkdtemp(prefix="nsj_bench_wakeup_")) if args.keep_logs else None
    load_before = os.getloadavg()[0]
    try:
        results = measure(
            args.dsn, args.tasks, args.rate, args.warmup, log_dir, tuple(args.mode or MODES)
        )
    except BenchError as exc:
        print(f"bench_server_wakeup: FAILED: {exc}", file=sys.stderr)
        return 1
    load = {
        "load_1min_before": load_before,
        "load_1min_after": os.getloadavg()[0],
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps({**results, "machine": load}))
    else:
        print(
            f"Wake-up latency, enqueue commit -> handler start ({args.tasks} tasks at {args.rate:g}/s, "
            f"1 worker, QUEUE_CONCURRENCY=1)"
        )
        header = (
            f"{'mode':<34} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'min ms':>8} {'max ms':>8}"
        )
        print(header)
        print("-" * len(header))
        labels = {"server": "client/server (socket server)", "listen": "LISTEN/NOTIFY (PostgreSQL)"}
        for mode, r in results.items():
            print(
                f"{labels[mode]:<34} {r['p50']:8.2f} {r['p95']:8.2f} {r['p99']:8.2f} {r['min']:8.2f} "
                f"{r['max']:8.2f}"
            )
        print(
            f"(1-minute load average {load['load_1min_before']:.1f} before, {load['load_1min_after']:.1f} after, "
            f"{load['cpus']} CPUs: tails are only meaningful on a quiet machine)"
        )
    if log_dir is not None:
        print(f"logs in {log_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
