"""Runs every benchmark on one PostgreSQL and prints a table of medians (and min/max).

    .venv/bin/python benchmarks/run_all.py                 # 3 runs: ~6-7 minutes on a quiet 2-core machine
    .venv/bin/python benchmarks/run_all.py --quick         # short smoke run (~1 minute)
    .venv/bin/python benchmarks/run_all.py --markdown out.md

The database is ``BENCH_PG_DSN`` (a libpq connection string, default
``host=127.0.0.1 user=postgres dbname=test``). Every workload runs on a
fresh queue table made by ``nsj_queue_lib.db_gen.render`` and dropped after.

Workloads (targets from issue 3 are printed next to the numbers):
  (a) ceiling   single-row UPDATE + commit per second (autocommit: one
                statement per transaction, one round trip), 2 and 8 threads,
                each with its own connection and its own row; also 8
                processes, which the GIL does not hold back. And (b)'s
                transactions without the queue: BEGIN, a one-row INSERT into
                a table with only a primary key, COMMIT, from one client.
  (b) enqueue   QueueClient.insert_task, one task per transaction (psycopg's
                default transaction: BEGIN, INSERT, COMMIT); the same with an
                autocommit connection (no target); QueueClient.insert_tasks
                with 5,000 and 50,000 tasks in one call, then commit.
  (c) drain     5,000 no-op tasks, real worker processes (bench_worker.py).
                Workers start on an empty queue; once they all listen, the
                5,000 tasks are inserted with insert_tasks in one transaction
                and the clock runs from that commit until all 5,000 are
                'sucesso' (polled every ~20 ms, interpolated). One worker at
                default settings, then a grid of processes x QUEUE_CONCURRENCY:
                one screening run of each, then the best, its neighbours and
                the next best measured ``--runs`` more times. Workers are
                stopped with SIGTERM and must exit 0. Then the best
                configuration once more with QUEUE_SYNCHRONOUS_COMMIT=false
                (opt-in asynchronous commits; a row of its own, no target).
  (d) latency   one idle worker at default settings; 200 tasks enqueued at
                50/s, one insert_task per transaction; latency = handler start
                (time.time() in the worker) - commit return (time.time() in
                the enqueuer). 5 warm-up tasks first, not counted.
  (e) backlog   50,000 tasks inserted at once, drain rate of the first 5,000
                by one default worker, divided by (c)'s default rate of the
                same run.
  (f) latency   (d) through the socket server (CLIENT_SERVER_MODE), from
                bench_server_wakeup.py; no target. ``--no-server`` skips it.

The machine may be shared. Each measurement starts when the machine has been
quiet for a moment (waiting up to 2 minutes) and is repeated (up to 3
attempts) when processes that are not ours (not this process, its children,
or PostgreSQL serving them) used more than 10% of the CPU during it; when
every attempt was disturbed, the least disturbed one is kept and listed.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import platform
import queue as queue_module
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    DEFAULT_DSN,
    FOREIGN_LIMIT,
    BenchError,
    Monitor,
    connect,
    fresh_queue,
    running_workers,
    task_rows,
    wait_succeeded,
)

from nsj_queue_lib import QueueClient

# -- configuration ----------------------------------------------------------------------------


@dataclass
class Config:
    dsn: str
    runs: int
    log_dir: Path
    ceiling_seconds: float = 3.0
    ceiling_threads: tuple[int, ...] = (2, 8)
    ceiling_processes: tuple[int, ...] = (
        8,
    )  # not in the brief: shows what 8 threads lose to the GIL
    enqueue_single: int = 5_000
    enqueue_bulk: tuple[int, ...] = (5_000, 50_000)
    drain_tasks: int = 5_000
    latency_tasks: int = 200
    latency_rate: float = 50.0
    latency_warmup: int = 5
    backlog_total: int = 50_000
    backlog_measured: int = 5_000
    grid_processes: tuple[int, ...] = (1, 2, 3, 4)
    grid_concurrency: tuple[int, ...] = (1, 2, 4, 8)
    grid_rerun: int = 4  # configurations measured `runs` times after the screening pass
    drain_timeout: float = 180.0
    server_latency: bool = True  # (f), through bench_server_wakeup.py
    attempts: int = (
        3  # a measurement disturbed by other processes is repeated up to this many times
    )
    max_quiet_wait: float = 120.0  # seconds to wait for a quiet machine before each measurement

    @classmethod
    def quick(cls, dsn: str, log_dir: Path) -> Config:
        return cls(
            dsn=dsn,
            runs=1,
            log_dir=log_dir,
            ceiling_seconds=1.0,
            enqueue_single=1_000,
            enqueue_bulk=(5_000,),
            drain_tasks=1_000,
            latency_tasks=50,
            backlog_total=10_000,
            backlog_measured=1_000,
            grid_processes=(1, 2),
            grid_concurrency=(1, 4),
            grid_rerun=1,
            drain_timeout=60.0,
            ceiling_processes=(),
            attempts=1,
            max_quiet_wait=10.0,
        )


# -- results ----------------------------------------------------------------------------------


@dataclass
class Metric:
    key: str
    label: str
    unit: str
    target: float | None = None
    higher_is_better: bool = True
    values: list[float] = field(default_factory=list)
    digits: int = 0

    def add(self, value: float | None) -> None:
        if value is not None:
            self.values.append(value)

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def fmt(self, value: float | None) -> str:
        if value is None:
            return "n/a"
        return f"{value:,.{self.digits}f}"

    def target_text(self) -> str:
        if self.target is None:
            return ""
        sign = ">=" if self.higher_is_better else "<="
        return f"{sign} {self.target:,.{self.digits}f}"

    def status(self) -> str:
        if self.target is None:
            return ""
        m = self.median
        if m is None:
            return "no data"
        ok = m >= self.target if self.higher_is_better else m <= self.target
        return "met" if ok else "MISSED"


class Results:
    def __init__(self) -> None:
        self.metrics: dict[str, Metric] = {}
        self.notes: list[str] = []
        self.grid: dict[tuple[int, int], list[dict]] = {}
        self.disturbed: list[str] = []  # measurements kept although other processes used the CPU

    def metric(self, key: str, label: str, unit: str, **kw) -> Metric:
        if key not in self.metrics:
            self.metrics[key] = Metric(key, label, unit, **kw)
        return self.metrics[key]


# -- measuring under a monitor ----------------------------------------------------------------


@dataclass
class Measured:
    value: object
    foreign: float  # share of the machine used by foreign processes during the measurement


class Bench:
    """Runs measurements when the machine is quiet and repeats disturbed ones."""

    def __init__(self, cfg: Config, results: Results, monitor: Monitor):
        self.cfg = cfg
        self.results = results
        self.monitor = monitor

    def measure(self, label: str, fn, *args):
        """fn(bench, *args) -> Measured. Returns its value, or None when it failed.

        When every attempt was disturbed, the least disturbed one is kept and noted.
        """
        best = None
        for attempt_no in range(1, self.cfg.attempts + 1):
            self.monitor.wait_quiet(self.cfg.max_quiet_wait)
            try:
                got = fn(self, *args)
            except (BenchError, psycopg.Error, OSError) as exc:
                msg = f"{label}: FAILED: {exc}"
                print("  " + msg, flush=True)
                self.results.notes.append(msg)
                return None
            if got.foreign <= FOREIGN_LIMIT:
                return got.value
            if best is None or got.foreign < best.foreign:
                best = got
            print(
                f"  .. {label}: {got.foreign:.0%} of the machine went to other processes during the "
                f"measurement" + ("; repeating" if attempt_no < self.cfg.attempts else ""),
                flush=True,
            )
        self.results.disturbed.append(f"{label}: {best.foreign:.0%}")
        return best.value


# -- (a) ceiling ------------------------------------------------------------------------------


def _ceiling_loop(dsn: str, table: str, row_id: int, seconds: float, barrier, out, release) -> None:
    """One client: UPDATE its own row (autocommit) for ``seconds`` after the barrier opens.

    It reports its count, then waits for ``release``: the parent reads the
    clients' CPU time before they exit.
    """
    n = -1
    try:
        with connect(dsn, autocommit=True) as c:
            sql = f"UPDATE {table} SET tentativa = tentativa + 1 WHERE id = %s"
            for _ in range(10):  # warm up: the statement is prepared after a few executions
                c.execute(sql, (row_id,), prepare=True)
            barrier.wait()
            end = time.perf_counter() + seconds
            n = 0
            while time.perf_counter() < end:
                c.execute(sql, (row_id,), prepare=True)
                n += 1
            out.put(n)
            release.wait(60)
    finally:
        if n < 0:
            out.put(n)


def bench_ceiling(b: Bench, clients: int, use_processes: bool) -> Measured:
    """Single-row UPDATE + commit transactions per second from ``clients`` threads or processes.

    Autocommit: each UPDATE is its own transaction, committed (synchronously)
    in the same round trip. Each client has its own connection and own row.
    """
    cfg = b.cfg
    with fresh_queue(cfg.dsn) as queue:
        table = f"public.{queue}"
        with connect(cfg.dsn) as conn:
            ids = QueueClient(conn, table).insert_tasks(task_rows(clients))
            conn.commit()
        if use_processes:
            ctx = multiprocessing.get_context("spawn")  # never fork a process holding connections
            barrier, out, release, make = (
                ctx.Barrier(clients + 1),
                ctx.Queue(),
                ctx.Event(),
                ctx.Process,
            )
        else:
            barrier, out, release, make = (
                threading.Barrier(clients + 1),
                queue_module.Queue(),
                threading.Event(),
                threading.Thread,
            )
        pool = [
            make(
                target=_ceiling_loop,
                args=(cfg.dsn, table, ids[i], cfg.ceiling_seconds, barrier, out, release),
            )
            for i in range(clients)
        ]
        for p in pool:
            p.start()
        try:
            barrier.wait(timeout=60)
        except threading.BrokenBarrierError as exc:
            raise BenchError("a ceiling client failed to start") from exc
        b.monitor.start()
        try:
            counts = [out.get(timeout=cfg.ceiling_seconds + 30) for _ in pool]
            foreign = b.monitor.stop().foreign
        finally:
            release.set()
            for p in pool:
                p.join()
        if any(n < 0 for n in counts):
            raise BenchError("a ceiling client failed")
        return Measured(sum(counts) / cfg.ceiling_seconds, foreign)


# -- (b) enqueue ------------------------------------------------------------------------------


def bench_insert_ceiling(b: Bench) -> Measured:
    """(b)'s transactions without the queue: BEGIN, one-row INSERT ... RETURNING id, COMMIT.

    Into a table with only a primary key, no trigger, on a connection in
    psycopg's default transaction mode, one per transaction: what the server,
    the network and the commit's WAL flush allow one client on this machine.
    """
    with fresh_queue(b.cfg.dsn) as queue, connect(b.cfg.dsn) as conn:
        table = f"public.{queue}_insert_ceiling"
        conn.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, payload text)")
        conn.commit()
        try:
            sql = f"INSERT INTO {table} (payload) VALUES (%s) RETURNING id"
            b.monitor.start()
            t0 = time.perf_counter()
            for n in range(b.cfg.enqueue_single):
                conn.execute(sql, (f'{{"n": {n}}}',)).fetchone()
                conn.commit()
            elapsed = time.perf_counter() - t0
            foreign = b.monitor.stop().foreign
        finally:
            conn.rollback()
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.commit()
        return Measured(b.cfg.enqueue_single / elapsed, foreign)


def bench_enqueue_single(b: Bench, autocommit: bool = False, prepare=None) -> Measured:
    """insert_task then commit, one task per transaction.

    ``autocommit`` (variants.py only): no explicit transaction, so no BEGIN
    round trip; ``prepare(conn, queue)`` alters the fresh queue first.
    """
    with fresh_queue(b.cfg.dsn) as queue, connect(b.cfg.dsn, autocommit=autocommit) as conn:
        if prepare is not None:
            prepare(conn, queue)
            conn.commit()
        client = QueueClient(conn, f"public.{queue}")
        rows = task_rows(b.cfg.enqueue_single)
        b.monitor.start()
        t0 = time.perf_counter()
        for r in rows:
            client.insert_task(**r)
            conn.commit()
        elapsed = time.perf_counter() - t0
        return Measured(len(rows) / elapsed, b.monitor.stop().foreign)


def bench_enqueue_bulk(b: Bench, count: int) -> Measured:
    with fresh_queue(b.cfg.dsn) as queue, connect(b.cfg.dsn) as conn:
        client = QueueClient(conn, f"public.{queue}")
        rows = task_rows(count)
        b.monitor.start()
        t0 = time.perf_counter()
        ids = client.insert_tasks(rows)
        conn.commit()
        elapsed = time.perf_counter() - t0
        foreign = b.monitor.stop().foreign
        if len(ids) != count:
            raise BenchError(f"insert_tasks returned {len(ids)} ids for {count} tasks")
        return Measured(count / elapsed, foreign)


# -- (c), (e) drain ---------------------------------------------------------------------------


@dataclass
class DrainResult:
    rate: float
    seconds: float
    worker_cpu_ms_per_1k: float
    pg_cpu_ms_per_1k: float
    machine_busy: float  # share of all cores busy during the drain


def bench_drain(
    b: Bench,
    processes: int,
    concurrency: int,
    total: int,
    measured: int,
    extra_env: dict[str, str] | None = None,
    prepare=None,
) -> Measured:
    """Insert ``total`` tasks at once for running workers; time the first ``measured`` to 'sucesso'.

    ``extra_env`` and ``prepare(conn, queue)`` are for variants.py.
    """
    cfg = b.cfg
    with fresh_queue(cfg.dsn) as queue:
        rows = task_rows(total)
        if prepare is not None:
            with connect(cfg.dsn, autocommit=True) as admin:
                prepare(admin, queue)
        with (
            running_workers(
                cfg.dsn, queue, processes, concurrency, cfg.log_dir, extra_env
            ) as workers,
            connect(cfg.dsn, autocommit=True) as poll,
            connect(cfg.dsn) as conn,
        ):
            client = QueueClient(conn, f"public.{queue}")
            ids = client.insert_tasks(rows)
            conn.commit()
            t0 = time.perf_counter()
            b.monitor.start()
            seconds = wait_succeeded(
                poll, queue, ids[0], ids[measured - 1], measured, t0, cfg.drain_timeout
            )
            usage = b.monitor.stop()
            if total == measured:
                left = poll.execute(
                    f"SELECT count(*) FROM public.{queue} WHERE status <> 'sucesso'"
                ).fetchone()[0]
                if left:
                    raise BenchError(f"{left} rows are not 'sucesso' after the drain")
        codes = workers.exit_codes
    if any(c != 0 for c in codes):
        raise BenchError(f"worker exit codes {codes} after SIGTERM (expected all 0)")
    per_1k = 1000.0 / measured
    return Measured(
        DrainResult(
            rate=measured / seconds,
            seconds=seconds,
            worker_cpu_ms_per_1k=usage.workers * 1000 * per_1k,
            pg_cpu_ms_per_1k=usage.postgres
            * 1000
            * per_1k,  # background processes and the poller's backend too
            machine_busy=usage.machine_busy,
        ),
        usage.foreign,
    )


# -- (d) latency ------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolation percentile (numpy's default)."""
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def bench_latency(b: Bench) -> Measured:
    cfg = b.cfg
    with fresh_queue(cfg.dsn) as queue:
        lat_file = cfg.log_dir / f"{queue}.latency"
        n = cfg.latency_warmup + cfg.latency_tasks
        with (
            running_workers(
                cfg.dsn, queue, 1, 1, cfg.log_dir, {"BENCH_LATENCY_FILE": str(lat_file)}
            ) as workers,
            connect(cfg.dsn) as conn,
        ):
            client = QueueClient(conn, f"public.{queue}")
            rows = task_rows(n)
            committed: dict[int, float] = {}
            order: list[int] = []
            interval = 1.0 / cfg.latency_rate
            b.monitor.start()
            start = time.perf_counter() + interval
            for i, r in enumerate(rows):
                pause = start + i * interval - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                task_id = client.insert_task(**r)
                conn.commit()
                committed[task_id] = time.time()
                order.append(task_id)
            deadline = time.monotonic() + 30
            started: dict[int, float] = {}
            while time.monotonic() < deadline:
                started = {}
                if lat_file.exists():
                    for line in lat_file.read_text().splitlines():
                        tid, ts = line.split()
                        started[int(tid)] = float(ts)
                if len(started) >= n:
                    break
                time.sleep(0.02)
            foreign = b.monitor.stop().foreign
        if any(c != 0 for c in workers.exit_codes):
            raise BenchError(
                f"worker exit codes {workers.exit_codes} after SIGTERM (expected all 0)"
            )
    measured = order[cfg.latency_warmup :]
    missing = [t for t in measured if t not in started]
    if missing:
        raise BenchError(f"{len(missing)} tasks never started (e.g. {missing[:5]})")
    lat_ms = [(started[t] - committed[t]) * 1000.0 for t in measured]
    return Measured(
        {
            "p50": percentile(lat_ms, 50),
            "p95": percentile(lat_ms, 95),
            "p99": percentile(lat_ms, 99),
            "max": max(lat_ms),
            "min": min(lat_ms),
        },
        foreign,
    )


def bench_server_latency(b: Bench) -> Measured:
    """(f) the same latency through the socket server (CLIENT_SERVER_MODE), from bench_server_wakeup.py."""
    import bench_server_wakeup

    cfg = b.cfg
    b.monitor.start()
    try:
        got = bench_server_wakeup.measure(
            cfg.dsn,
            cfg.latency_tasks,
            cfg.latency_rate,
            cfg.latency_warmup,
            cfg.log_dir,
            modes=("server",),
        )
    except bench_server_wakeup.BenchError as exc:
        raise BenchError(str(exc)) from exc
    return Measured(got["server"], b.monitor.stop().foreign)


# -- the run ----------------------------------------------------------------------------------


def environment(dsn: str) -> dict[str, str]:
    with connect(dsn, autocommit=True) as conn:
        pg = conn.execute("SHOW server_version").fetchone()[0]
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('synchronous_commit', 'fsync', 'shared_buffers', 'max_connections')"
            ).fetchall()
        )
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "cpus": f"{os.cpu_count()} ({model})" if model else str(os.cpu_count()),
        "postgresql": f"{pg} on the same machine (synchronous_commit={settings.get('synchronous_commit')}, "
        f"fsync={settings.get('fsync')}, shared_buffers={int(settings.get('shared_buffers', 0)) // 128} MB)",
        "psycopg": f"{psycopg.__version__} ({psycopg.pq.__impl__}, libpq {psycopg.pq.version()})",
        "python": platform.python_version(),
        "nsj_queue_lib": commit,
    }


def run_once(b: Bench, run: int) -> None:
    cfg, results = b.cfg, b.results
    print(f"== run {run}/{cfg.runs}", flush=True)
    for clients in cfg.ceiling_threads:
        v = b.measure(f"(a) ceiling {clients} threads", bench_ceiling, clients, False)
        results.metric(f"a{clients}", f"(a) ceiling: UPDATE+commit, {clients} threads", "tx/s").add(
            v
        )
        print(f"  (a) ceiling, {clients} threads: {v and round(v):,} tx/s", flush=True)
    for clients in cfg.ceiling_processes:
        v = b.measure(f"(a) ceiling {clients} processes", bench_ceiling, clients, True)
        results.metric(
            f"a{clients}p", f"(a) ceiling: UPDATE+commit, {clients} processes", "tx/s"
        ).add(v)
        print(f"  (a) ceiling, {clients} processes: {v and round(v):,} tx/s", flush=True)

    v = b.measure("(a) ceiling insert", bench_insert_ceiling)
    results.metric(
        "a_insert",
        f"(a) ceiling: BEGIN, INSERT into a primary-key-only table, COMMIT "
        f"({cfg.enqueue_single:,})",
        "tx/s",
    ).add(v)
    print(f"  (a) ceiling, BEGIN/INSERT/COMMIT, one client: {v and round(v):,} tx/s", flush=True)

    v = b.measure("(b) insert_task", bench_enqueue_single)
    results.metric(
        "b1", f"(b) enqueue: insert_task, 1 per tx ({cfg.enqueue_single:,})", "tasks/s", target=2000
    ).add(v)
    print(f"  (b) insert_task one per tx: {v and round(v):,} tasks/s", flush=True)
    v = b.measure("(b) insert_task autocommit", bench_enqueue_single, True)
    results.metric(
        "b1a", f"(b) enqueue: insert_task, autocommit ({cfg.enqueue_single:,})", "tasks/s"
    ).add(v)
    print(
        f"  (b) insert_task autocommit (one statement per transaction, no BEGIN): {v and round(v):,} tasks/s",
        flush=True,
    )
    for count in cfg.enqueue_bulk:
        v = b.measure(f"(b) insert_tasks {count}", bench_enqueue_bulk, count)
        results.metric(
            f"b{count}", f"(b) enqueue: insert_tasks, {count:,} in 1 call", "tasks/s", target=30000
        ).add(v)
        print(f"  (b) insert_tasks {count:,}: {v and round(v):,} tasks/s", flush=True)

    d = b.measure("(c) drain default", bench_drain, 1, 1, cfg.drain_tasks, cfg.drain_tasks)
    results.metric(
        "c_default",
        f"(c) drain {cfg.drain_tasks:,}: 1 worker, default settings",
        "tasks/s",
        target=600,
    ).add(d and d.rate)
    if d:
        results.grid.setdefault((1, 1), []).append(vars(d))
        print(
            f"  (c) drain, 1 process x concurrency 1: {d.rate:,.0f} tasks/s "
            f"(worker CPU {d.worker_cpu_ms_per_1k:.0f} ms/1k tasks, PG CPU {d.pg_cpu_ms_per_1k:.0f} ms/1k, "
            f"machine busy {d.machine_busy:.0%})",
            flush=True,
        )

    lat = b.measure("(d) latency", bench_latency)
    for p, target in (("p50", 2.5), ("p95", None), ("p99", 10.0)):
        results.metric(
            f"d_{p}",
            f"(d) latency commit -> handler start, {p}",
            "ms",
            target=target,
            higher_is_better=False,
            digits=2,
        ).add(lat and lat[p])
    if lat:
        print(
            f"  (d) latency: p50 {lat['p50']:.2f} ms, p95 {lat['p95']:.2f} ms, p99 {lat['p99']:.2f} ms, "
            f"min {lat['min']:.2f}, max {lat['max']:.2f}",
            flush=True,
        )

    e = b.measure("(e) backlog", bench_drain, 1, 1, cfg.backlog_total, cfg.backlog_measured)
    results.metric(
        "e_rate",
        f"(e) backlog: first {cfg.backlog_measured:,} of {cfg.backlog_total:,}, 1 worker",
        "tasks/s",
    ).add(e and e.rate)
    ratio = e.rate / d.rate if (e and d) else None
    results.metric(
        "e_ratio", "(e) backlog rate / (c) default rate (same run)", "ratio", target=0.9, digits=2
    ).add(ratio)
    if e:
        print(
            f"  (e) backlog: {e.rate:,.0f} tasks/s, ratio {ratio and round(ratio, 2)}", flush=True
        )

    if cfg.server_latency:
        srv = b.measure("(f) latency via the socket server", bench_server_latency)
        for p in ("p50", "p95", "p99"):
            results.metric(
                f"f_{p}",
                f"(f) same as (d), CLIENT_SERVER_MODE, {p}",
                "ms",
                higher_is_better=False,
                digits=2,
            ).add(srv and srv[p])
        if srv:
            print(
                f"  (f) latency via the socket server: p50 {srv['p50']:.2f} ms, p95 {srv['p95']:.2f} ms, "
                f"p99 {srv['p99']:.2f} ms",
                flush=True,
            )


def grid_neighbours(best: tuple[int, int], cfg: Config) -> list[tuple[int, int]]:
    procs, conc = list(cfg.grid_processes), list(cfg.grid_concurrency)
    p, c = best
    out = []
    pi, ci = procs.index(p), conc.index(c)
    for dp, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        if 0 <= pi + dp < len(procs) and 0 <= ci + dc < len(conc):
            out.append((procs[pi + dp], conc[ci + dc]))
    return out


def run_grid(b: Bench) -> None:
    """Screening pass over the whole grid (one run each; 1 x 1 is (c)'s default), then the best
    configuration, its grid neighbours and the next best are measured ``runs`` more times."""
    cfg, results = b.cfg, b.results
    print("== grid (c): processes x QUEUE_CONCURRENCY, screening pass (1 run each)", flush=True)
    screening: dict[tuple[int, int], float] = {}
    default_runs = results.grid.get((1, 1), [])
    if default_runs:
        screening[(1, 1)] = statistics.median(r["rate"] for r in default_runs)
    for p in cfg.grid_processes:
        for c in cfg.grid_concurrency:
            if (p, c) == (1, 1) and default_runs:
                continue
            d = b.measure(f"(c) grid {p}x{c}", bench_drain, p, c, cfg.drain_tasks, cfg.drain_tasks)
            if d:
                screening[(p, c)] = d.rate
                print(
                    f"  {p} x {c}: {d.rate:,.0f} tasks/s (worker CPU {d.worker_cpu_ms_per_1k:.0f} ms/1k, "
                    f"PG CPU {d.pg_cpu_ms_per_1k:.0f} ms/1k, machine busy {d.machine_busy:.0%})",
                    flush=True,
                )
    results.screening = screening
    if not screening:
        return
    ranked = sorted(screening, key=screening.get, reverse=True)
    chosen: list[tuple[int, int]] = []
    for cand in [ranked[0], *grid_neighbours(ranked[0], cfg), *ranked[1:]]:
        if cand not in chosen and cand in screening and cand != (1, 1):
            chosen.append(cand)
        if len(chosen) >= cfg.grid_rerun:
            break
    print(
        f"== grid (c): {cfg.runs} more runs of {', '.join(f'{p}x{c}' for p, c in chosen)}",
        flush=True,
    )
    for run in range(cfg.runs):
        for p, c in chosen:
            d = b.measure(f"(c) grid {p}x{c}", bench_drain, p, c, cfg.drain_tasks, cfg.drain_tasks)
            if d:
                results.grid.setdefault((p, c), []).append(vars(d))
                print(f"  run {run + 1}: {p} x {c}: {d.rate:,.0f} tasks/s", flush=True)
    medians = {
        k: statistics.median(r["rate"] for r in v) for k, v in results.grid.items() if k != (1, 1)
    }
    if medians:
        best = max(medians, key=medians.get)
        m = results.metric(
            "c_best",
            f"(c) drain {cfg.drain_tasks:,}: best, {best[0]} processes x concurrency {best[1]}",
            "tasks/s",
            target=3000,
        )
        m.values = [r["rate"] for r in results.grid[best]]
        run_best_asynchronous(b, best)


def run_best_asynchronous(b: Bench, best: tuple[int, int]) -> None:
    """The best configuration again with QUEUE_SYNCHRONOUS_COMMIT=false (opt-in, not durable; no target)."""
    cfg = b.cfg
    p, c = best
    m = b.results.metric(
        "c_best_async",
        f"(c) drain {cfg.drain_tasks:,}: {p} processes x concurrency {c}, "
        "QUEUE_SYNCHRONOUS_COMMIT=false",
        "tasks/s",
    )
    print(f"== (c) {p}x{c} with QUEUE_SYNCHRONOUS_COMMIT=false: {cfg.runs} runs", flush=True)
    for run in range(cfg.runs):
        d = b.measure(
            f"(c) {p}x{c} asynchronous commits",
            bench_drain,
            p,
            c,
            cfg.drain_tasks,
            cfg.drain_tasks,
            {"QUEUE_SYNCHRONOUS_COMMIT": "false"},
        )
        if d:
            m.add(d.rate)
            print(
                f"  run {run + 1}: {d.rate:,.0f} tasks/s (worker CPU {d.worker_cpu_ms_per_1k:.0f} ms/1k, "
                f"PG CPU {d.pg_cpu_ms_per_1k:.0f} ms/1k)",
                flush=True,
            )


# -- output -----------------------------------------------------------------------------------


def summary_rows(results: Results) -> list[list[str]]:
    rows = []
    ordered = sorted(enumerate(results.metrics.values()), key=lambda im: (im[1].key[0], im[0]))
    for _, m in ordered:
        rows.append(
            [
                m.label,
                m.unit,
                m.fmt(m.median),
                m.fmt(min(m.values) if m.values else None),
                m.fmt(max(m.values) if m.values else None),
                str(len(m.values)),
                m.target_text(),
                m.status(),
            ]
        )
    return rows


SUMMARY_HEADER = ["workload", "unit", "median", "min", "max", "runs", "target", "status"]
GRID_HEADER = [
    "processes x concurrency",
    "screening tasks/s",
    "median tasks/s",
    "min",
    "max",
    "runs",
    "worker CPU ms / 1k tasks",
    "PG CPU ms / 1k tasks",
    "machine busy",
]


def grid_rows(results: Results) -> list[list[str]]:
    screening = getattr(results, "screening", {})
    keys = sorted(set(screening) | set(results.grid))
    rows = []
    for k in keys:
        runs = results.grid.get(k, [])
        rates = [r["rate"] for r in runs]

        def med(name: str, fmt: str, runs: list = runs) -> str:
            return format(statistics.median(r[name] for r in runs), fmt) if runs else ""

        rows.append(
            [
                f"{k[0]} x {k[1]}",
                "= (c)" if k == (1, 1) else f"{screening[k]:,.0f}" if k in screening else "",
                f"{statistics.median(rates):,.0f}" if rates else "",
                f"{min(rates):,.0f}" if rates else "",
                f"{max(rates):,.0f}" if rates else "",
                str(len(rates)) if rates else "",
                med("worker_cpu_ms_per_1k", ",.0f"),
                med("pg_cpu_ms_per_1k", ",.0f"),
                med("machine_busy", ".0%"),
            ]
        )
    return rows


def text_table(header: list[str], rows: list[list[str]], left: set[int]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    out = [
        "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    for r in rows:
        out.append(
            "  ".join(
                c.ljust(w) if i in left else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
    return "\n".join(out)


def md_table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    out = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(" ---: " if i in right else " --- " for i in range(len(header))) + "|",
    ]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def markdown(env: dict[str, str], results: Results, cfg: Config, elapsed: float) -> str:
    parts = [
        f"Run of {env['date']}: {cfg.runs} run(s), {elapsed / 60:.1f} minutes in all.",
        "",
        "| environment | |",
        "| --- | --- |",
        *(f"| {k} | {v} |" for k, v in env.items() if k != "date"),
        "",
        md_table(SUMMARY_HEADER, summary_rows(results), {2, 3, 4, 5}),
    ]
    if results.grid:
        parts += [
            "",
            f"Drain grid ({cfg.drain_tasks:,} no-op tasks; screening = one run of every configuration, then the "
            "best configurations and the best one's neighbours measured again):",
            "",
            md_table(GRID_HEADER, grid_rows(results), set(range(1, len(GRID_HEADER)))),
        ]
    if results.disturbed:
        parts += [
            "",
            f"Kept although other processes used more than {FOREIGN_LIMIT:.0%} of the machine "
            f"during every attempt (share of foreign CPU): {'; '.join(results.disturbed)}.",
        ]
    if results.notes:
        parts += ["", "Failures:", "", *(f"- {n}" for n in results.notes)]
    return "\n".join(parts) + "\n"


def print_results(results: Results, cfg: Config, elapsed: float) -> None:
    print()
    print(f"Results ({cfg.runs} run(s), medians; {elapsed / 60:.1f} min)")
    print(text_table(SUMMARY_HEADER, summary_rows(results), {0, 1, 6, 7}))
    if results.grid:
        print()
        print("Drain grid (processes x QUEUE_CONCURRENCY)")
        print(text_table(GRID_HEADER, grid_rows(results), {0}))
    if results.disturbed:
        print()
        print(
            f"Disturbed (other processes used > {FOREIGN_LIMIT:.0%} of the machine in every attempt; "
            "the least disturbed attempt was kept):"
        )
        for n in results.disturbed:
            print(f"  - {n}")
    if results.notes:
        print()
        print("Failures:")
        for n in results.notes:
            print(f"  - {n}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="runs of every workload (default 3)")
    parser.add_argument(
        "--quick", action="store_true", help="a short smoke run: 1 run, small sizes, 2x2 grid"
    )
    parser.add_argument(
        "--markdown", metavar="FILE", help="also write the results as markdown to FILE"
    )
    parser.add_argument(
        "--no-grid", action="store_true", help="skip the processes x concurrency grid"
    )
    parser.add_argument(
        "--no-server",
        action="store_true",
        help="skip (f), the latency through the socket server (CLIENT_SERVER_MODE)",
    )
    parser.add_argument(
        "--grid",
        metavar="P,P/C,C",
        help="grid to try, e.g. '1,2,3,4/1,2,4,8' (processes/concurrency)",
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the workers' logs (printed path)"
    )
    args = parser.parse_args(argv)

    dsn = os.environ.get("BENCH_PG_DSN") or DEFAULT_DSN
    log_dir = Path(tempfile.mkdtemp(prefix="nsj_bench_"))
    cfg = (
        Config.quick(dsn, log_dir)
        if args.quick
        else Config(dsn=dsn, runs=args.runs, log_dir=log_dir)
    )
    if args.quick and args.runs != 3:
        cfg.runs = args.runs
    if args.no_server:
        cfg.server_latency = False
    if args.grid:
        p, c = args.grid.split("/")
        cfg.grid_processes = tuple(int(x) for x in p.split(","))
        cfg.grid_concurrency = tuple(int(x) for x in c.split(","))

    env = environment(dsn)
    print("nsj_queue_lib benchmarks")
    for k, v in env.items():
        print(f"  {k:14} {v}")
    print(f"  {'dsn':14} {dsn}")
    print(flush=True)

    results = Results()
    started = time.perf_counter()
    with connect(dsn, autocommit=True) as activity:
        bench = Bench(cfg, results, Monitor(activity))
        try:
            for run in range(1, cfg.runs + 1):
                run_once(bench, run)
            if not args.no_grid:
                run_grid(bench)
        except KeyboardInterrupt:
            print("interrupted: partial results", file=sys.stderr)
    elapsed = time.perf_counter() - started

    print_results(results, cfg, elapsed)
    if args.markdown:
        Path(args.markdown).write_text(markdown(env, results, cfg, elapsed))
        print(f"\nmarkdown written to {args.markdown}")
    if args.keep_logs:
        print(f"worker logs in {log_dir}")
    else:
        for f in log_dir.iterdir():
            f.unlink()
        log_dir.rmdir()
    return 1 if results.notes else 0


if __name__ == "__main__":
    sys.exit(main())
