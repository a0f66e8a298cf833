"""MariaDB benchmark rows next to PostgreSQL's: the same workloads, the same run, medians of 3.

    .venv/bin/python benchmarks/bench_mysql.py                # 3 runs, ~5 minutes on a quiet 2-core machine
    .venv/bin/python benchmarks/bench_mysql.py --quick        # one short run (~1-2 minutes)
    .venv/bin/python benchmarks/bench_mysql.py --only mariadb --markdown out.md

Databases: ``BENCH_PG_DSN`` (libpq, default ``host=127.0.0.1 user=postgres
dbname=test``) and ``BENCH_MYSQL_DSN`` (default ``mysql://root:@127.0.0.1:3306/test``).
Every workload runs on a fresh queue made by ``nsj_queue_lib.db_gen.render``
with the database's dialect, dropped afterwards. The worker is
``bench_worker.py`` (a no-op ``WorkerBase``), started from compiled bytecode as an
installed worker would be (``_bytecode.py``).

Workloads, each on PostgreSQL and on MariaDB:
  enqueue   QueueClient.insert_task one per transaction (commit each), and
            QueueClient.insert_tasks with 5,000 and 50,000 tasks in one call.
  drain     5,000 no-op tasks for worker processes that are already running
            and connected; the clock runs from the commit of the insert_tasks
            transaction until all 5,000 are 'sucesso' (polled every ~20 ms).
            One worker at default settings (on MariaDB that includes the
            default QUEUE_POLL_INTERVAL=0.5 s: up to half a second before the
            first claim), then a small grid for 2 cores (processes x
            QUEUE_CONCURRENCY; on MariaDB with QUEUE_POLL_INTERVAL=0.1), one
            screening run each; then each database's best configuration
            measured again in rounds (one per run), the two databases back
            to back in alternating order, and MariaDB's rate divided by
            PostgreSQL's within each round: this 2-core VM's speed drifts by
            tens of percent within minutes, which a comparison of medians
            taken minutes apart does not survive.
            With each drain: CPU of the worker processes and of the database
            server per 1,000 tasks (from /proc; the server's figure includes
            its other clients, and PostgreSQL backends that exit during the
            drain are not counted).
  latency   one idle worker (concurrency 1); 200 tasks enqueued at 50/s, one
            insert_task per transaction; latency = handler start (time.time()
            in the worker) - commit return (time.time() in the enqueuer).
            PostgreSQL: LISTEN/NOTIFY. MariaDB: polling at QUEUE_POLL_INTERVAL
            0.5 s (default) and 0.1 s. 5 warm-up tasks first, not counted.

Measurements wait for a quiet machine first (other processes' CPU below 15%
for a second, at most 60 s) and say when they could not.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
WORKER_SCRIPT = HERE.parent / "bench_worker.py"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from _bytecode import compile_library  # noqa: E402 - next to this file

DEFAULT_PG_DSN = "host=127.0.0.1 user=postgres dbname=test"
DEFAULT_MYSQL_DSN = "mysql://root:@127.0.0.1:3306/test"
POLL_SECONDS = 0.02
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0
_counter = itertools.count(1)
# The tables of a queue besides its own (keys of DdlNames.object_names()): db_gen's, and
# those its workers create on first use. Dropped with the queue: a later queue of the same
# name (bench_history's history table) would fail to create one left behind.
QUEUE_SIDE_TABLES = (
    "subscriber",
    "limits",
    "periodic",
    "workers",
    "tally",
    "tally_open",
    "tally_state",
    "parents",
    "waiting",
    "steps",
    "events",
    "workflows",
    "workflow_tasks",
    "processes",
    "process_tasks",
    "process_events",
    "groups",
)
_CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    pass


# -- databases --------------------------------------------------------------------------------------


@dataclass
class Database:
    """One benchmarked database: how to connect, make a queue, and point workers at it."""

    kind: str  # "postgres" | "mariadb"
    dsn: str
    layout: str = "plain"  # db_gen --layout (docs/internals/storage.md)

    def __post_init__(self) -> None:
        if self.kind == "postgres":
            from psycopg.conninfo import conninfo_to_dict

            info = conninfo_to_dict(self.dsn)
            self.params = dict(
                host=str(info.get("host") or "127.0.0.1"),
                port=int(info.get("port") or 5432),
                name=str(info.get("dbname") or "postgres"),
                user=str(info.get("user") or "postgres"),
                password=str(info.get("password") or ""),
            )
            self.schema = "public"
        else:
            parts = urllib.parse.urlsplit(self.dsn)
            self.params = dict(
                host=parts.hostname or "127.0.0.1",
                port=parts.port or 3306,
                name=urllib.parse.unquote(parts.path.lstrip("/")),
                user=urllib.parse.unquote(parts.username or "root"),
                password=urllib.parse.unquote(parts.password or ""),
            )
            self.schema = self.params["name"]

    @property
    def label(self) -> str:
        return "PostgreSQL" if self.kind == "postgres" else "MariaDB"

    def connect(self, autocommit: bool = False):
        if self.kind == "postgres":
            import psycopg

            return psycopg.connect(
                self.dsn, autocommit=autocommit, application_name="nsj_bench_mysql"
            )
        import pymysql

        p = self.params
        return pymysql.connect(
            host=p["host"],
            port=p["port"],
            user=p["user"],
            password=p["password"],
            database=p["name"],
            autocommit=autocommit,
            charset="utf8mb4",
        )

    def execute(self, conn, sql: str, args=None):
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall() if cur.description else None

    @contextlib.contextmanager
    def fresh_queue(self) -> Iterator[str]:
        """A new queue from db_gen (this database's dialect); yields ``schema.table``; dropped after."""
        table = self.create_queue(f"bm_{os.getpid()}_{next(_counter)}")
        try:
            yield table
        finally:
            self.drop_queue(table)

    def create_queue(self, name: str, layout: str | None = None) -> str:
        """Queue ``name`` from db_gen (this database's dialect; the table's ``layout``, by
        default the database's); returns ``schema.table``."""
        from nsj_queue_lib.db.mysql.dialect import split_script
        from nsj_queue_lib.db_gen import render

        admin = self.connect(autocommit=True)
        try:
            if self.kind == "postgres":
                admin.execute(render(self.schema, name, layout=layout or self.layout))
            else:
                for statement in split_script(
                    render(self.schema, name, "mysql", layout=layout or self.layout)
                ):
                    self.execute(admin, statement)
        finally:
            admin.close()
        return f"{self.schema}.{name}"

    def drop_queue(self, table: str) -> None:
        """Drop every object of the queue ``schema.table`` made, also those its workers made
        (``_limits``, ``_periodic``, ``_workers``) and the routines no CASCADE reaches."""
        from nsj_queue_lib.db.dialect import CLAIM_ROUTINE_RELEASE, DdlNames

        name = table.split(".")[-1]
        names = DdlNames(self.schema, name).object_names()
        tables = ", ".join([table] + [f"{self.schema}.{names[k]}" for k in QUEUE_SIDE_TABLES])
        admin = self.connect(autocommit=True)
        try:
            if self.kind == "postgres":
                admin.execute(
                    f"DROP TABLE IF EXISTS {tables} CASCADE;"
                    f"DROP FUNCTION IF EXISTS {self.schema}.notify_{name}_insert() CASCADE;"
                    f"DROP FUNCTION IF EXISTS {self.schema}.{DdlNames.settle_routine_name(name)};"
                    f"DROP FUNCTION IF EXISTS {self.schema}.{names['end_function']}() CASCADE;"
                    f"DROP FUNCTION IF EXISTS {self.schema}.{names['day_function']}() CASCADE;"
                    f"DROP FUNCTION IF EXISTS {self.schema}.{names['release_function']}"
                )
                return
            self.execute(admin, f"DROP TABLE IF EXISTS {tables}")
            self.execute(
                admin, f"DROP PROCEDURE IF EXISTS {self.schema}.{names['release_function']}"
            )
            for release in range(1, CLAIM_ROUTINE_RELEASE + 1):
                routine = DdlNames.routine_name(name, release)
                self.execute(admin, f"DROP PROCEDURE IF EXISTS {self.schema}.{routine}")
            limited = DdlNames.limited_routine_name(name)
            self.execute(admin, f"DROP PROCEDURE IF EXISTS {self.schema}.{limited}")
        finally:
            admin.close()

    def worker_env(self, table: str, extra: dict[str, str]) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(
                ("DB_", "DATABASE_", "QUEUE_", "LOG_", "GRAFANA_", "CLIENT_SERVER_MODE", "BENCH_")
            )
        }
        p = self.params
        env.update(
            DB_DRIVER="POSTGRES" if self.kind == "postgres" else "MYSQL",
            DB_HOST=p["host"],
            DB_PORT=str(p["port"]),
            DB_BASE=p["name"],
            DB_USER=p["user"],
            DB_PASS=p["password"],
            QUEUE_NAME=table.split(".")[-1],
            QUEUE_TABLE=table,
            LOG_DEBUG="false",
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        env.update(extra)
        return env

    def describe(self) -> str:
        conn = self.connect(autocommit=True)
        try:
            if self.kind == "postgres":
                version = conn.execute("SHOW server_version").fetchone()[0]
                s = dict(
                    conn.execute(
                        "SELECT name, setting FROM pg_settings WHERE name IN "
                        "('synchronous_commit', 'fsync', 'shared_buffers')"
                    ).fetchall()
                )
                return (
                    f"PostgreSQL {version} (synchronous_commit={s['synchronous_commit']}, fsync={s['fsync']}, "
                    f"shared_buffers={int(s['shared_buffers']) // 128} MB)"
                )
            [(version, flush, bp, binlog)] = self.execute(
                conn,
                "SELECT VERSION(), @@innodb_flush_log_at_trx_commit, "
                "@@innodb_buffer_pool_size, @@log_bin",
            )
            return (
                f"MariaDB {version} (innodb_flush_log_at_trx_commit={flush}, "
                f"innodb_buffer_pool_size={int(bp) // 2**20} MB, log_bin={binlog})"
            )
        finally:
            conn.close()


def add_database_options(parser: argparse.ArgumentParser) -> None:
    """``--only``, ``--pg-dsn`` and ``--mysql-dsn`` (BENCH_PG_DSN, BENCH_MYSQL_DSN) of a
    benchmark that runs on both databases; ``chosen_databases`` reads them back."""
    parser.add_argument("--only", choices=("postgres", "mariadb"))
    parser.add_argument("--pg-dsn", default=os.environ.get("BENCH_PG_DSN", DEFAULT_PG_DSN))
    parser.add_argument("--mysql-dsn", default=os.environ.get("BENCH_MYSQL_DSN", DEFAULT_MYSQL_DSN))


def chosen_databases(args: argparse.Namespace) -> list[tuple[Database, str]]:
    """The databases ``add_database_options`` chose, each with its db_gen dialect."""
    kinds = [args.only] if args.only else ["postgres", "mariadb"]
    return [
        (
            Database(kind, args.pg_dsn if kind == "postgres" else args.mysql_dsn),
            "postgres" if kind == "postgres" else "mysql",
        )
        for kind in kinds
    ]


def task_rows(count: int, lock_keys: int = 0) -> list[dict]:
    """``count`` no-op tasks; with ``lock_keys``, spread round-robin over that many lock keys."""
    return [
        {
            "origem": "bench",
            "destino": "bench",
            "processo": "noop",
            "chave_externa": str(i),
            "payload": {"n": i},
            **({"lock_key": f"k{i % lock_keys}"} if lock_keys else {}),
        }
        for i in range(count)
    ]


# -- a quiet machine -------------------------------------------------------------------------------


def _cpu_ticks() -> dict[int, int]:
    ticks = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rpartition(b")")[2].split()
                ticks[int(entry.name)] = int(fields[11]) + int(fields[12])
            except (OSError, IndexError, ValueError):
                pass
    return ticks


def _machine_busy() -> tuple[float, float]:
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    total = sum(parts[:8])
    return total - idle, total


DB_PROCESS_NAMES = {"postgres": ("postgres",), "mariadb": ("mariadbd", "mysqld")}


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def cpu_snapshot(worker_pids: list[int], db_kind: str) -> dict[int, tuple[str, int]]:
    """pid -> ("worker" | "db", CPU ticks so far) of the worker processes and the database server's."""
    names = DB_PROCESS_NAMES[db_kind]
    workers = set(worker_pids)
    out = {}
    for pid, ticks in _cpu_ticks().items():
        if pid in workers:
            out[pid] = ("worker", ticks)
        elif _comm(pid) in names:
            out[pid] = ("db", ticks)
    return out


def cpu_used(
    before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]]
) -> dict[str, int]:
    """Ticks used between two snapshots, per kind. Per process: one that appeared counts from
    zero; one that exited in between (a PostgreSQL backend) is not counted."""
    used = {"worker": 0, "db": 0}
    for pid, (kind, ticks) in after.items():
        start = before.get(pid)
        used[kind] += ticks - (start[1] if start and start[0] == kind else 0)
    return used


def busy_share(seconds: float = 0.5) -> float:
    """Share of all cores busy over ``seconds`` (the whole machine)."""
    b0, t0 = _machine_busy()
    time.sleep(seconds)
    b1, t1 = _machine_busy()
    return (b1 - b0) / max(1, t1 - t0)


def wait_quiet(max_wait: float = 60.0, limit: float = 0.15) -> str | None:
    """Wait until the machine is quiet twice in a row; a note when it never was."""
    start = time.monotonic()
    quiet = 0
    share = 0.0
    while time.monotonic() - start < max_wait:
        share = busy_share(0.5)
        quiet = quiet + 1 if share < limit else 0
        if quiet >= 2:
            return None
    return f"machine still {share:.0%} busy after {max_wait:.0f} s; measured anyway"


# -- worker processes ------------------------------------------------------------------------------


@dataclass
class Workers:
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    exit_codes: list[int | None] = field(default_factory=list)


@contextlib.contextmanager
def running_workers(
    db: Database,
    table: str,
    processes: int,
    extra: dict[str, str],
    log_dir: Path,
    script: Path | None = None,
    wait_ready: bool = True,
) -> Iterator[Workers]:
    """``processes`` worker processes on ``table``; with ``wait_ready``, yielded once each
    is ready (else at once: a backlog drain times them from their start). ``script``: a
    benchmark's own worker, run with ``--worker`` (default: ``bench_worker.py``)."""
    compile_library()
    command = [str(WORKER_SCRIPT)] if script is None else [str(script), "--worker"]
    workers = Workers()
    ready = []
    try:
        for i in range(processes):
            ready_file = log_dir / f"{table}.{i}.ready"
            ready.append(ready_file)
            log = log_dir / f"{table}.{i}.log"
            env = db.worker_env(table, {**extra, "BENCH_READY_FILE": str(ready_file)})
            with open(log, "wb") as out:
                workers.procs.append(
                    subprocess.Popen(
                        [sys.executable, *command],
                        env=env,
                        cwd=str(ROOT),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
            workers.logs.append(log)
        deadline = time.monotonic() + READY_TIMEOUT
        while wait_ready and not all(f.exists() for f in ready):
            for proc, log in zip(workers.procs, workers.logs, strict=True):
                if proc.poll() is not None:
                    raise BenchError(f"worker exited early ({proc.returncode}): {_tail(log)}")
            if time.monotonic() > deadline:
                raise BenchError(f"workers not ready after {READY_TIMEOUT:.0f} s")
            time.sleep(0.02)
        if wait_ready:
            time.sleep(0.3)  # the dispatchers reach their wait
        yield workers
    finally:
        for proc in workers.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, log in zip(workers.procs, workers.logs, strict=True):
            try:
                workers.exit_codes.append(proc.wait(STOP_TIMEOUT))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                workers.exit_codes.append(None)
            if workers.exit_codes[-1] != 0:
                print(
                    f"  !! worker exit code {workers.exit_codes[-1]}: {_tail(log)}", file=sys.stderr
                )


def _tail(path: Path, lines: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# -- workloads -------------------------------------------------------------------------------------


def bench_enqueue_single(db: Database, count: int, autocommit: bool = False) -> float:
    """``insert_task`` of one task per transaction: the caller's transaction and its
    commit, or (``autocommit``) a connection in autocommit mode, each insert its own."""
    from nsj_queue_lib import QueueClient

    with db.fresh_queue() as table:
        conn = db.connect(autocommit=True) if autocommit else db.connect()
        try:
            client = QueueClient(conn, table)
            rows = task_rows(count)
            t0 = time.perf_counter()
            for row in rows:
                client.insert_task(**row)
                if not autocommit:
                    conn.commit()
            return count / (time.perf_counter() - t0)
        finally:
            conn.close()


def bench_enqueue_bulk(db: Database, count: int) -> float:
    from nsj_queue_lib import QueueClient

    with db.fresh_queue() as table:
        conn = db.connect()
        try:
            rows = task_rows(count)
            t0 = time.perf_counter()
            ids = QueueClient(conn, table).insert_tasks(rows)
            conn.commit()
            elapsed = time.perf_counter() - t0
        finally:
            conn.close()
    if len(ids) != count:
        raise BenchError(f"insert_tasks returned {len(ids)} ids for {count} tasks")
    return count / elapsed


@dataclass
class Drain:
    rate: float  # tasks/s
    worker_ms_per_1k: float  # CPU of the worker processes per 1,000 tasks
    db_ms_per_1k: float  # CPU of the database server per 1,000 tasks (its other clients included)


def bench_drain(
    db: Database,
    processes: int,
    concurrency: int,
    extra: dict[str, str],
    count: int,
    log_dir: Path,
    timeout: float = 180.0,
    lock_keys: int = 0,
) -> Drain:
    """``count`` no-op tasks committed at once for running workers, until all are 'sucesso'."""
    from nsj_queue_lib import QueueClient

    env = {"QUEUE_CONCURRENCY": str(concurrency), **extra}
    with db.fresh_queue() as table, running_workers(db, table, processes, env, log_dir) as workers:
        poll = db.connect(autocommit=True)
        conn = db.connect()
        try:
            ids = QueueClient(conn, table).insert_tasks(task_rows(count, lock_keys))
            cpu0 = cpu_snapshot([p.pid for p in workers.procs], db.kind)
            conn.commit()
            t0 = time.perf_counter()
            sql = f"SELECT count(*) FROM {table} WHERE id BETWEEN %s AND %s AND status = 'sucesso'"
            prev_t, prev_c = t0, 0
            while True:
                done = db.execute(poll, sql, (ids[0], ids[-1]))[0][0]
                now = time.perf_counter()
                if done >= count:
                    cpu1 = cpu_snapshot([p.pid for p in workers.procs], db.kind)
                    if done > prev_c:  # interpolate between the last two polls
                        now = prev_t + (now - prev_t) * (count - prev_c) / (done - prev_c)
                    elapsed = now - t0
                    break
                if now - t0 > timeout:
                    raise BenchError(f"only {done}/{count} tasks done after {timeout:.0f} s")
                prev_t, prev_c = now, done
                time.sleep(POLL_SECONDS)
        finally:
            conn.close()
            poll.close()
    if any(code != 0 for code in workers.exit_codes):
        raise BenchError(f"worker exit codes {workers.exit_codes} after SIGTERM")
    per_1k = 1000.0 / count * 1000.0 / _CLK_TCK
    used = cpu_used(cpu0, cpu1)
    return Drain(count / elapsed, used["worker"] * per_1k, used["db"] * per_1k)


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def bench_latency(
    db: Database, extra: dict[str, str], tasks: int, rate: float, warmup: int, log_dir: Path
) -> dict[str, float]:
    from nsj_queue_lib import QueueClient

    with db.fresh_queue() as table:
        latency_file = log_dir / f"{table}.latency"
        env = {"QUEUE_CONCURRENCY": "1", "BENCH_LATENCY_FILE": str(latency_file), **extra}
        total = warmup + tasks
        with running_workers(db, table, 1, env, log_dir) as workers:
            conn = db.connect()
            try:
                client = QueueClient(conn, table)
                committed: dict[int, float] = {}
                order: list[int] = []
                interval = 1.0 / rate
                start = time.perf_counter() + interval
                for i, row in enumerate(task_rows(total)):
                    pause = start + i * interval - time.perf_counter()
                    if pause > 0:
                        time.sleep(pause)
                    task_id = client.insert_task(**row)
                    conn.commit()
                    committed[task_id] = time.time()
                    order.append(task_id)
            finally:
                conn.close()
            started: dict[int, float] = {}
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if latency_file.exists():
                    started = {
                        int(a): float(b)
                        for a, b in (
                            line.split()
                            for line in latency_file.read_text().splitlines()
                            if line.strip()
                        )
                    }
                if len(started) >= total:
                    break
                time.sleep(0.05)
        if any(code != 0 for code in workers.exit_codes):
            raise BenchError(f"worker exit codes {workers.exit_codes} after SIGTERM")
    measured = order[warmup:]
    missing = [t for t in measured if t not in started]
    if missing:
        raise BenchError(f"{len(missing)} tasks never started")
    ms = [(started[t] - committed[t]) * 1000.0 for t in measured]
    return {
        "p50": percentile(ms, 50),
        "p95": percentile(ms, 95),
        "p99": percentile(ms, 99),
        "max": max(ms),
    }


# -- the run ---------------------------------------------------------------------------------------


@dataclass
class Config:
    runs: int = 3
    enqueue_single: int = 2_000
    enqueue_bulk: tuple[int, ...] = (5_000, 50_000)
    drain_tasks: int = 5_000
    grid: tuple[tuple[int, int], ...] = (
        (1, 2),
        (1, 4),
        (2, 1),
        (2, 2),
        (2, 4),
        (3, 2),
        (3, 4),
        (4, 2),
    )
    latency_tasks: int = 200
    latency_rate: float = 50.0
    latency_warmup: int = 5

    @classmethod
    def quick(cls) -> Config:
        return cls(
            runs=1,
            enqueue_single=500,
            enqueue_bulk=(5_000,),
            drain_tasks=2_000,
            grid=((1, 4), (2, 2)),
            latency_tasks=50,
        )


class Table:
    """rows[(workload, database)] = list of values (one per run)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], list[float]] = {}
        self.order: list[str] = []
        self.units: dict[str, str] = {}
        self.notes: list[str] = []

    def add(self, workload: str, unit: str, database: str, value: float | None) -> None:
        if workload not in self.order:
            self.order.append(workload)
            self.units[workload] = unit
        if value is not None:
            self.rows.setdefault((workload, database), []).append(value)

    def median(self, workload: str, database: str) -> float | None:
        values = self.rows.get((workload, database))
        return statistics.median(values) if values else None

    def render(self, databases: list[str], markdown: bool = False) -> str:
        header = ["workload", "unit"]
        for d in databases:
            header += [f"{d} median", f"{d} min-max"]
        if len(databases) == 2:
            header.append(f"{databases[1]} / {databases[0]}")
        lines = []
        for workload in self.order:
            unit = self.units[workload]
            digits = {"ms": 1, "ratio": 2}.get(unit, 0)
            row = [workload, unit]
            medians = []
            for d in databases:
                values = self.rows.get((workload, d), [])
                m = statistics.median(values) if values else None
                medians.append(m)
                row.append(f"{m:,.{digits}f}" if m is not None else "-")
                row.append(
                    f"{min(values):,.{digits}f}-{max(values):,.{digits}f} ({len(values)})"
                    if values
                    else "-"
                )
            if len(databases) == 2:
                a, b = medians
                row.append(f"{b / a:.2f}" if a and b else "")
            lines.append(row)
        if markdown:
            out = [
                "| " + " | ".join(header) + " |",
                "|" + "|".join([" --- ", " --- "] + [" ---: "] * (len(header) - 2)) + "|",
            ]
            out += ["| " + " | ".join(r) + " |" for r in lines]
            return "\n".join(out)
        widths = [max(len(str(x)) for x in col) for col in zip(header, *lines, strict=True)]
        out = [
            "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
            "  ".join("-" * w for w in widths),
        ]
        for r in lines:
            out.append(
                "  ".join(
                    c.ljust(w) if i < 2 else c.rjust(w)
                    for i, (c, w) in enumerate(zip(r, widths, strict=True))
                )
            )
        return "\n".join(out)


def measure(table: Table, what: str, database: str, fn, *args, record=None):
    """Run ``fn(*args)`` on a quiet machine; ``record(value)`` adds its rows. Returns the value or None."""
    note = wait_quiet()
    if note:
        table.notes.append(f"{what} ({database}): {note}")
    try:
        value = fn(*args)
    except BenchError as exc:
        table.notes.append(f"{what} ({database}): FAILED: {exc}")
        print(f"  {what} [{database}]: FAILED: {exc}", flush=True)
        return None
    if isinstance(value, dict):
        shown = ", ".join(f"{k} {v:.1f} ms" for k, v in value.items())
    elif isinstance(value, Drain):
        shown = (
            f"{value.rate:,.0f} tasks/s (worker CPU {value.worker_ms_per_1k:,.0f} ms / 1k tasks, "
            f"database CPU {value.db_ms_per_1k:,.0f} ms / 1k tasks)"
        )
    else:
        shown = f"{value:,.0f} tasks/s"
    print(f"  {what} [{database}]: {shown}", flush=True)
    if record is not None:
        record(value)
    return value


def drain_rows(table: Table, name: str, database: str):
    def record(d: Drain) -> None:
        table.add(name, "tasks/s", database, d.rate)
        table.add(f"{name}: worker CPU per 1k tasks", "ms", database, d.worker_ms_per_1k)
        table.add(f"{name}: database CPU per 1k tasks", "ms", database, d.db_ms_per_1k)

    return record


def rate_row(table: Table, name: str, database: str):
    return lambda value: table.add(name, "tasks/s", database, value)


def mariadb_poll(interval: float) -> dict[str, str]:
    return {"QUEUE_POLL_INTERVAL": f"{interval:g}"}


MARIADB_POLLS = (0.5, 0.1)  # the default, and a short interval
PAIRED_RATIO_ROW = "drain, best configurations: MariaDB / PostgreSQL within each round"


def latency_variants(db: Database) -> list[tuple[float | None, dict[str, str]]]:
    """(polling interval or None for LISTEN, worker environment) of the latency runs."""
    if db.kind == "postgres":
        return [(None, {})]
    return [(poll, mariadb_poll(poll)) for poll in MARIADB_POLLS]


def _measure_round(
    table: Table, cfg: Config, db: Database, log_dir: Path, default_row: str
) -> None:
    """One run of the enqueue, default drain and latency workloads on ``db``."""
    name = f"enqueue: insert_task, 1 per tx ({cfg.enqueue_single:,})"
    measure(
        table,
        name,
        db.label,
        bench_enqueue_single,
        db,
        cfg.enqueue_single,
        record=rate_row(table, name, db.label),
    )
    for count in cfg.enqueue_bulk:
        name = f"enqueue: insert_tasks, {count:,} in 1 call"
        measure(
            table,
            name,
            db.label,
            bench_enqueue_bulk,
            db,
            count,
            record=rate_row(table, name, db.label),
        )
    measure(
        table,
        default_row,
        db.label,
        bench_drain,
        db,
        1,
        1,
        {},
        cfg.drain_tasks,
        log_dir,
        record=drain_rows(table, default_row, db.label),
    )
    for poll, env in latency_variants(db):
        what = "latency, LISTEN" if poll is None else f"latency, poll {poll:g} s"
        lat = measure(
            table,
            what,
            db.label,
            bench_latency,
            db,
            env,
            cfg.latency_tasks,
            cfg.latency_rate,
            cfg.latency_warmup,
            log_dir,
        )
        for p in ("p50", "p95", "p99"):
            # One PostgreSQL (LISTEN) value faces each MariaDB polling interval.
            for row_poll in MARIADB_POLLS if poll is None else (poll,):
                table.add(
                    f"latency {p}: PG LISTEN / MariaDB poll {row_poll:g} s",
                    "ms",
                    db.label,
                    lat[p] if lat else None,
                )


def _screen_grid(
    table: Table, cfg: Config, dbs: list[Database], log_dir: Path, grid_env: dict
) -> tuple[dict[str, tuple[int, int]], list[str]]:
    """One drain per grid point and database: (best point per database, screening rows)."""
    best: dict[str, tuple[int, int]] = {}
    screening_rows: list[str] = []
    for db in dbs:
        screening = {}
        for processes, concurrency in cfg.grid:
            name = f"drain grid {processes} x {concurrency} (screening, 1 run)"
            if name not in screening_rows:
                screening_rows.append(name)
            d = measure(
                table,
                name,
                db.label,
                bench_drain,
                db,
                processes,
                concurrency,
                grid_env[db.kind],
                cfg.drain_tasks,
                log_dir,
                record=lambda d, n=name, label=db.label: table.add(n, "tasks/s", label, d.rate),
            )
            if d is not None:
                screening[(processes, concurrency)] = d
        if screening:
            best[db.label] = max(screening, key=lambda k: screening[k].rate)
    return best, screening_rows


def _paired_rounds(
    table: Table,
    cfg: Config,
    dbs: list[Database],
    log_dir: Path,
    grid_env: dict,
    best: dict[str, tuple[int, int]],
    best_row: str,
) -> None:
    """The best configurations again, both databases per round in alternating order."""
    for round_no in range(cfg.runs):
        rates: dict[str, float] = {}
        for db in dbs if round_no % 2 == 0 else dbs[::-1]:
            if db.label in best:
                p, c = best[db.label]
                d = measure(
                    table,
                    f"{best_row} ({p} x {c})",
                    db.label,
                    bench_drain,
                    db,
                    p,
                    c,
                    grid_env[db.kind],
                    cfg.drain_tasks,
                    log_dir,
                    record=drain_rows(table, best_row, db.label),
                )
                if d is not None:
                    rates[db.label] = d.rate
        if len(rates) == 2 and len(dbs) == 2:
            first, second = (rates[db.label] for db in dbs)
            table.add(PAIRED_RATIO_ROW, "ratio", dbs[1].label, second / first)


def run(cfg: Config, dbs: list[Database], log_dir: Path) -> Table:
    table = Table()
    grid_env = {"postgres": {}, "mariadb": mariadb_poll(0.1)}
    default_row = f"drain {cfg.drain_tasks:,}: 1 worker, default settings"
    best_row = f"drain {cfg.drain_tasks:,}: best configuration"
    for run_no in range(1, cfg.runs + 1):
        print(f"== run {run_no}/{cfg.runs}", flush=True)
        for db in dbs:
            _measure_round(table, cfg, db, log_dir, default_row)

    print("== drain grid (processes x QUEUE_CONCURRENCY), screening: 1 run each", flush=True)
    best, screening_rows = _screen_grid(table, cfg, dbs, log_dir, grid_env)
    # The best configurations measured again in rounds, both databases back to
    # back, in alternating order: this machine's speed drifts by tens of
    # percent within minutes, so the ratio is taken within each round (the
    # screening values, picked as maxima, are not reused).
    print("== best configurations, paired rounds", flush=True)
    _paired_rounds(table, cfg, dbs, log_dir, grid_env, best, best_row)
    for db in dbs:
        if db.label in best:
            p, c = best[db.label]
            table.notes.append(
                f"best drain configuration on {db.label}: {p} process(es) x QUEUE_CONCURRENCY {c}"
                + (" with QUEUE_POLL_INTERVAL=0.1" if db.kind == "mariadb" else "")
            )
    # The best configuration's rows right after the default drain's; screening rows last.
    best_rows = [w for w in table.order if w.startswith(best_row) or w == PAIRED_RATIO_ROW]
    order = [w for w in table.order if w not in screening_rows and w not in best_rows]
    at = max(i for i, w in enumerate(order) if w.startswith(default_row)) + 1
    order[at:at] = best_rows
    table.order = order + screening_rows
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one short run")
    parser.add_argument("--runs", type=int, default=None, help="runs of every workload (default 3)")
    parser.add_argument(
        "--only", choices=("postgres", "mariadb"), help="benchmark one database only"
    )
    parser.add_argument(
        "--markdown", metavar="FILE", help="also write the table as markdown to FILE"
    )
    parser.add_argument("--grid", metavar="PxC,...", help="drain grid to screen, e.g. 1x4,2x2,3x2")
    args = parser.parse_args(argv)
    cfg = Config.quick() if args.quick else Config()
    if args.runs is not None:
        cfg.runs = args.runs
    if args.grid:
        cfg.grid = tuple(tuple(int(n) for n in item.split("x")) for item in args.grid.split(","))
    dbs = []
    if args.only in (None, "postgres"):
        dbs.append(Database("postgres", os.environ.get("BENCH_PG_DSN") or DEFAULT_PG_DSN))
    if args.only in (None, "mariadb"):
        dbs.append(Database("mariadb", os.environ.get("BENCH_MYSQL_DSN") or DEFAULT_MYSQL_DSN))
    log_dir = Path(tempfile.mkdtemp(prefix="nsj_bench_mysql_"))
    try:
        commit = subprocess.run(
            ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
    except OSError:
        commit = ""
    environment = {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "cpus": str(os.cpu_count()),
        "python": platform.python_version(),
        "nsj_queue_lib": commit,
        **{db.label: db.describe() for db in dbs},
    }
    print("nsj_queue_lib benchmarks: PostgreSQL and MariaDB")
    for k, v in environment.items():
        print(f"  {k:14} {v}")
    started = time.perf_counter()
    try:
        table = run(cfg, dbs, log_dir)
    finally:
        for f in log_dir.iterdir():
            f.unlink()
        log_dir.rmdir()
    elapsed = time.perf_counter() - started
    labels = [db.label for db in dbs]
    print()
    print(f"Results ({cfg.runs} run(s), medians; {elapsed / 60:.1f} min)")
    print(table.render(labels))
    if table.notes:
        print()
        for note in table.notes:
            print(f"  - {note}")
    if args.markdown:
        text = [f"Run of {environment['date']}, {cfg.runs} run(s), {elapsed / 60:.1f} minutes.", ""]
        text += [f"- {k}: {v}" for k, v in environment.items() if k != "date"]
        text += ["", table.render(labels, markdown=True), ""]
        text += [f"- {n}" for n in table.notes]
        Path(args.markdown).write_text("\n".join(text) + "\n")
        print(f"\nmarkdown written to {args.markdown}")
    return 1 if any("FAILED" in n for n in table.notes) else 0


if __name__ == "__main__":
    sys.exit(main())
