"""Helpers shared by the benchmarks: queues, worker processes, polling, CPU accounting.

Nothing here is a test: these functions measure and return numbers.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from _bytecode import compile_library
from psycopg.conninfo import conninfo_to_dict

from nsj_queue_lib.db.dialect import DdlNames
from nsj_queue_lib.db_gen import render

HERE = Path(__file__).resolve().parent
WORKER_SCRIPT = HERE / "bench_worker.py"
DEFAULT_DSN = "host=127.0.0.1 user=postgres dbname=test"
READY_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 60.0
POLL_INTERVAL_SECONDS = 0.02
CLK_TCK = os.sysconf("SC_CLK_TCK")
_counter = itertools.count(1)


class BenchError(RuntimeError):
    pass


# -- database ---------------------------------------------------------------------------------


# The benchmark's own processes (this one and the ceiling's spawned clients)
# share one owner id, so their connections and queues are told apart from
# anybody else's.
OWNER = os.environ.setdefault("NSJ_BENCH_OWNER", str(os.getpid()))
BENCH_APP = f"nsj_bench:{OWNER}"
QUEUE_PREFIX = f"bq_{OWNER}_"


def connect(dsn: str, autocommit: bool = False) -> psycopg.Connection:
    """A connection of the benchmark itself (its application_name marks it as ours)."""
    return psycopg.connect(dsn, autocommit=autocommit, application_name=BENCH_APP)


@contextlib.contextmanager
def fresh_queue(dsn: str, layout: str = "plain") -> Iterator[str]:
    """A new queue (table, subscriber table, indexes, trigger) from db_gen; dropped afterwards.

    Yields the queue name; the table is ``public.<name>``.
    """
    name = f"{QUEUE_PREFIX}{next(_counter)}"
    with connect(dsn, autocommit=True) as admin:
        admin.execute(render("public", name, layout=layout))
    try:
        yield name
    finally:
        with connect(dsn, autocommit=True) as admin:
            admin.execute(drop_queue_sql("public", name))


def drop_queue_sql(schema: str, name: str) -> str:
    """PostgreSQL: drop every object of queue ``schema.name``, also those its workers made
    (``_limits``, ``_periodic``, ``_workers``, ``_groups``: not dependent on the queue table, CASCADE
    misses them). The claim functions return the table's row type: CASCADE takes them; the
    group settle function names no table type, so it is dropped by name."""
    names = DdlNames(schema, name).object_names()
    tables = [name] + [
        names[key]
        for key in (
            "subscriber",
            "limits",
            "periodic",
            "workers",
            "groups",
            "parents",
            "waiting",
            "workflows",
            "workflow_tasks",
        )
    ]
    return (
        f"DROP TABLE IF EXISTS {', '.join(f'{schema}.{t}' for t in tables)} CASCADE;"
        f"DROP FUNCTION IF EXISTS {schema}.{names['function']}() CASCADE;"
        f"DROP FUNCTION IF EXISTS {schema}.{names['end_function']}() CASCADE;"
        f"DROP FUNCTION IF EXISTS {schema}.{names['day_function']}() CASCADE;"
        f"DROP FUNCTION IF EXISTS {schema}.{names['settle_function']};"
        f"DROP FUNCTION IF EXISTS {schema}.{names['release_function']}"
    )


def task_rows(count: int, start: int = 0) -> list[dict]:
    return [
        {
            "origem": "bench",
            "destino": "bench",
            "processo": "noop",
            "chave_externa": str(start + i),
            "payload": {"n": start + i},
        }
        for i in range(count)
    ]


# -- worker processes -------------------------------------------------------------------------


def worker_env(
    dsn: str, queue: str, concurrency: int, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of a benchmark worker: the DSN as DB_*, the queue, defaults for the rest."""
    info = conninfo_to_dict(dsn)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            ("DB_", "DATABASE_", "QUEUE_", "LOG_", "GRAFANA_", "CLIENT_SERVER_MODE")
        )
    }
    env.update(
        DB_HOST=str(info.get("host") or "127.0.0.1"),
        DB_PORT=str(info.get("port") or 5432),
        DB_BASE=str(info.get("dbname") or "postgres"),
        DB_USER=str(info.get("user") or "postgres"),
        QUEUE_NAME=queue,
        QUEUE_TABLE=f"public.{queue}",
        QUEUE_CONCURRENCY=str(concurrency),
        LOG_DEBUG="false",
    )
    if info.get("password"):
        env["DB_PASS"] = str(info["password"])
    env.update(extra or {})
    return env


@dataclass
class Workers:
    queue: str
    processes: int
    concurrency: int
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    exit_codes: list[int | None] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


def start_workers(
    dsn: str,
    queue: str,
    processes: int,
    concurrency: int,
    log_dir: Path,
    extra_env: dict[str, str] | None = None,
) -> Workers:
    compile_library()
    workers = Workers(queue, processes, concurrency)
    env = worker_env(dsn, queue, concurrency, extra_env)
    for i in range(processes):
        log = log_dir / f"{queue}.worker{i}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(WORKER_SCRIPT)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(HERE.parent),
            )
        workers.procs.append(proc)
        workers.logs.append(log)
    return workers


def wait_ready(dsn: str, workers: Workers, timeout: float = READY_TIMEOUT_SECONDS) -> float:
    """Wait until every worker LISTENs and has opened its connections; returns seconds waited.

    Seen from the database: each worker's connections carry the application
    name ``nsj_queue_lib:<queue>``; a ready worker has its LISTEN connection
    and its pool. The count must be steady for a moment (the pool opens in
    the background), then a short pause lets the dispatchers reach their wait.
    """
    app = f"nsj_queue_lib:{workers.queue}"[:63]
    expected = workers.processes * (2 + workers.concurrency)
    start = time.perf_counter()
    last_total, steady_since = -1, None
    with connect(dsn, autocommit=True) as conn:
        while True:
            for p in workers.procs:
                if p.poll() is not None:
                    raise BenchError(
                        f"worker {p.pid} exited early with code {p.returncode}: "
                        + _tail(workers.logs[workers.procs.index(p)])
                    )
            total, listening = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE query ILIKE 'LISTEN%%') "
                "FROM pg_stat_activity WHERE application_name = %s",
                (app,),
            ).fetchone()
            now = time.perf_counter()
            if total != last_total:
                last_total, steady_since = total, now
            if listening >= workers.processes and (total >= expected or now - steady_since >= 0.5):
                break
            if now - start > timeout:
                raise BenchError(
                    f"workers not ready after {timeout:.0f} s "
                    f"({total} connections, {listening} listening)"
                )
            time.sleep(0.02)
    time.sleep(0.25)
    return time.perf_counter() - start


def worker_ticks(pids: list[int]) -> int:
    """CPU ticks (user + system, ``CLK_TCK`` a second) the processes ``pids`` have used."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        total += int(fields[11]) + int(fields[12])
    return total


def stop_processes(procs: list[subprocess.Popen], timeout: float) -> list[int | None]:
    """SIGTERM every process, wait for them; the exit codes (None = had to be killed)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes: list[int | None] = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            codes.append(None)
    return codes


def stop_workers(workers: Workers) -> list[int | None]:
    """SIGTERM every worker, wait for them; returns the exit codes (None = had to be killed)."""
    codes = stop_processes(workers.procs, STOP_TIMEOUT_SECONDS)
    workers.exit_codes = codes
    for code, log in zip(codes, workers.logs, strict=True):
        if code != 0:
            print(f"  !! worker exit code {code}; log tail:\n{_tail(log)}", file=sys.stderr)
    return codes


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def running_workers(
    dsn: str,
    queue: str,
    processes: int,
    concurrency: int,
    log_dir: Path,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Workers]:
    workers = start_workers(dsn, queue, processes, concurrency, log_dir, extra_env)
    try:
        wait_ready(dsn, workers)
        yield workers
    finally:
        stop_workers(workers)


# -- waiting for results ----------------------------------------------------------------------


def wait_succeeded(
    conn: psycopg.Connection,
    queue: str,
    first_id: int,
    last_id: int,
    target: int,
    t0: float,
    timeout: float,
) -> float:
    """Wait until ``target`` rows with ids in [first_id, last_id] are 'sucesso'.

    Returns the seconds from ``t0`` (perf_counter) until the last of them finished, by
    its ``finished_at`` (the database's clock, read once here to place ``t0`` on it).
    While ``last_id`` is unfinished each poll (every ~20 ms) reads that one row by its
    primary key; after that, it counts the range. Counting the range at every poll read
    every measured row: on this 2-core machine about 7 ms of the database's CPU a poll,
    a tenth of a 10,000-task drain's, taken from the workers being measured.
    """
    db_now = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
    t0_db = db_now - (time.perf_counter() - t0)
    last = f"SELECT status FROM public.{queue} WHERE id = %s"
    count = f"SELECT count(*) FROM public.{queue} WHERE id BETWEEN %s AND %s AND status = 'sucesso'"
    end = (
        f"SELECT extract(epoch FROM max(finished_at))::float8 FROM public.{queue}"
        " WHERE id BETWEEN %s AND %s AND status = 'sucesso'"
    )
    last_done = False
    while True:
        if not last_done:
            row = conn.execute(last, (last_id,), prepare=True).fetchone()
            last_done = row is not None and row[0] == "sucesso"
        if last_done:
            done = conn.execute(count, (first_id, last_id), prepare=True).fetchone()[0]
            if done >= target:
                ended = conn.execute(end, (first_id, last_id)).fetchone()[0]
                # finished_at not written (a paired run's tree older than it): this poll's time.
                return time.perf_counter() - t0 if ended is None else ended - t0_db
        if time.perf_counter() - t0 > timeout:
            done = conn.execute(count, (first_id, last_id)).fetchone()[0]
            raise BenchError(f"only {done}/{target} tasks done after {timeout:.0f} s")
        time.sleep(POLL_INTERVAL_SECONDS)


# -- CPU accounting (Linux /proc) -------------------------------------------------------------


def machine_cpu_seconds() -> tuple[float, float, float]:
    """(busy, interrupts, total) CPU seconds of the whole machine since boot, from /proc/stat.

    ``interrupts`` (irq + softirq, part of busy) is charged to no process: on
    loopback it is mostly the benchmark's own network traffic.
    """
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]] + [0] * 8
    idle = parts[3] + parts[4]
    total = sum(parts[:8])
    return (total - idle) / CLK_TCK, (parts[5] + parts[6]) / CLK_TCK, total / CLK_TCK


# -- interference from the rest of the machine ------------------------------------------------
#
# The machine may be shared (other test suites, other databases' clients). A
# Monitor measures, over an interval, how much CPU went to processes that are
# not ours: machine busy time (from /proc/stat, steal included) minus this
# process, its children (the workers) and the PostgreSQL processes except
# other clients' backends. Measurements run only when the machine is quiet and
# are repeated when too much foreign CPU was seen during them.

FOREIGN_LIMIT = 0.10  # share of all cores; above it a measurement counts as disturbed
QUIET_LIMIT = 0.05


def _proc_table() -> dict[int, tuple[str, int, int]]:
    """pid -> (comm, ppid, utime+stime ticks) for every process."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        head, _, rest = data.rpartition(b")")
        comm = head.split(b"(", 1)[1].decode(errors="replace")
        fields = rest.split()
        table[int(entry.name)] = (comm, int(fields[1]), int(fields[11]) + int(fields[12]))
    return table


@dataclass
class Usage:
    wall: float  # seconds
    workers: float  # CPU seconds of this process's children (the worker processes)
    postgres: float  # CPU seconds of PostgreSQL processes, other clients' backends excluded
    bench: float  # CPU seconds of this process (enqueuer, poller)
    machine_busy: float  # share of all cores busy
    foreign: float  # share of all cores used by processes that are not ours


class Monitor:
    """Foreign CPU share of the machine between start() and stop()."""

    def __init__(self, activity_conn: psycopg.Connection):
        self._conn = activity_conn
        self._start = None

    def _foreign_backends(self) -> set[int]:
        rows = self._conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' "
            "AND pid <> pg_backend_pid() AND coalesce(application_name, '') <> %s "
            "AND coalesce(application_name, '') NOT LIKE %s",
            (BENCH_APP, f"nsj_queue_lib:{QUEUE_PREFIX}%"),
        ).fetchall()
        return {r[0] for r in rows}

    def foreign_active(self) -> int:
        return self._conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
            "AND pid <> pg_backend_pid() AND state NOT IN ('idle') "
            "AND coalesce(application_name, '') <> %s "
            "AND coalesce(application_name, '') NOT LIKE %s",
            (BENCH_APP, f"nsj_queue_lib:{QUEUE_PREFIX}%"),
        ).fetchone()[0]

    def _ours(self, table, foreign_pg: set[int]) -> dict[int, tuple[str, int]]:
        """pid -> (kind, ticks) of our processes: 'self', 'child' (workers) or 'postgres'."""
        me = os.getpid()
        ours = {}
        for pid, (comm, ppid, ticks) in table.items():
            if pid == me:
                ours[pid] = ("self", ticks)
            elif ppid == me:
                ours[pid] = ("child", ticks)
            elif comm == "postgres" and pid not in foreign_pg:
                ours[pid] = ("postgres", ticks)
        return ours

    @staticmethod
    def _reaped_children() -> float:
        """CPU seconds of this process's children that have exited and been waited for."""
        t = os.times()
        return t.children_user + t.children_system

    def start(self) -> None:
        busy, irq, _ = machine_cpu_seconds()
        self._start = (
            time.perf_counter(),
            busy,
            irq,
            self._reaped_children(),
            self._ours(_proc_table(), self._foreign_backends()),
        )

    def stop(self) -> Usage:
        """CPU used between start() and stop(): ours by kind, and the foreign share of the machine.

        Deltas are taken per process (a process that appeared counts from
        zero). Children that exit in between are counted through os.times();
        PostgreSQL backends that exit in between are lost (counted as foreign),
        which is why measurements stop the monitor before stopping workers.
        """
        busy1, irq1, _ = machine_cpu_seconds()
        reaped1 = self._reaped_children()
        t1 = time.perf_counter()
        ours1 = self._ours(_proc_table(), self._foreign_backends())
        t0, busy0, irq0, reaped0, ours0 = self._start
        by_kind = {"self": 0, "child": 0, "postgres": 0}
        for pid, (kind, ticks) in ours1.items():
            before = ours0.get(pid)
            by_kind[kind] += ticks - (before[1] if before and before[0] == kind else 0)
        # Children gone since start(): their whole CPU time is in os.times() now.
        gone = sum(
            ticks for pid, (kind, ticks) in ours0.items() if kind == "child" and pid not in ours1
        )
        workers = (by_kind["child"] - gone) / CLK_TCK + (reaped1 - reaped0)
        ours = workers + (by_kind["self"] + by_kind["postgres"]) / CLK_TCK
        foreign = max(0.0, (busy1 - busy0) - (irq1 - irq0) - ours)
        wall = t1 - t0
        return Usage(
            wall=wall,
            workers=workers,
            postgres=by_kind["postgres"] / CLK_TCK,
            bench=by_kind["self"] / CLK_TCK,
            machine_busy=(busy1 - busy0) / max(1e-9, wall * (os.cpu_count() or 1)),
            foreign=foreign / max(1e-9, wall * (os.cpu_count() or 1)),
        )

    def wait_quiet(self, max_wait: float, say=print) -> float:
        """Wait until the machine has been quiet for about a second; returns seconds waited."""
        start = time.perf_counter()
        quiet_in_a_row = 0
        announced = False
        while True:
            self.start()
            time.sleep(0.3)
            share = self.stop().foreign
            active = self.foreign_active()
            quiet_in_a_row = quiet_in_a_row + 1 if share < QUIET_LIMIT and active == 0 else 0
            if quiet_in_a_row >= 2:
                return time.perf_counter() - start
            waited = time.perf_counter() - start
            if waited > max_wait:
                say(
                    f"  .. machine still busy after {waited:.0f} s (foreign CPU {share:.0%}, "
                    f"{active} active foreign sessions); measuring anyway"
                )
                return waited
            if not announced and waited > 1.5:
                say(
                    f"  .. waiting for the machine to be quiet (foreign CPU {share:.0%}, "
                    f"{active} active foreign sessions)"
                )
                announced = True
