"""This library next to pgqueuer and graphile-worker on one PostgreSQL, in paired rounds
(issues 16 and 40).

    .venv/bin/python benchmarks/bench_pgqueuer.py              # 5 rounds, medians
    .venv/bin/python benchmarks/bench_pgqueuer.py --quick      # 2 rounds, 2,000 tasks
    .venv/bin/python benchmarks/bench_pgqueuer.py --markdown out.md
    .venv/bin/python benchmarks/bench_pgqueuer.py --latency-only   # the latency rows alone

pgqueuer (the ``bench`` extra pins it; ``make bench`` installs it) runs
``benchmarks/pgqueuer_worker.py``: an async no-op entrypoint on
``QueueManager.run`` with its documented defaults except ``batch_size``.
Its objects carry the prefix ``nsjqbench_`` and are created afresh.

Every round measures every row, in alternating order from round to round,
and the ratios are taken within each round (this VM's speed drifts by tens
of percent within minutes). Rows:

- ceiling: one-row ``UPDATE`` + commit, 8 threads, own connection and row
  each, 2 s (what pgbench's simple-update measures, without the queue);
- drain: ``--tasks`` no-op tasks committed at once for workers already
  listening; wall time from that commit until all are done, and the rate
  after the first one finished. Default settings (one process each) and
  the best configuration of each (screened once before the rounds);
- graphile-worker 0.18.0 (``graphile.py``: Node from the machine, skipped with a message
  where it is missing, or with ``--no-graphile``): its documented performance
  configuration (one process, concurrency 24, local queue 500, completion and failure
  batched with no delay) and its defaults, in both scenarios below;
- backlog drain: the same tasks committed first, then the workers started (as after a
  deploy or an outage), timed from their start: every side, best and default (ours and
  pgqueuer's best screened in this scenario too: more processes drain a burst faster but
  start more slowly);
- latency at low load: one task every 20 ms, enqueue commit -> handler start
  (graphile-worker in its performance configuration);
- backlog: 50,000 tasks committed at once, the first 5,000 (ours, best),
  next to (alternating which goes first) the same configuration draining
  5,000 tasks from an empty table: the ratio compares the same window of
  the same workers measured the same way, seconds apart;
- enqueue: ``insert_tasks`` against pgqueuer's ``Queries.enqueue`` with
  lists (its batch enqueue), 5,000 and 50,000 tasks, one call, one commit; and 2,000
  tasks one per transaction (``insert_task`` and a commit each, against ``enqueue`` of
  one job per call);
- worker CPU per 1,000 tasks of every burst drain (user + system of the worker
  processes from the commit to the last task, ``/proc``'s 10 ms ticks);
- MariaDB: our best drain on MariaDB, same round;
- floor: the bare SQL of a transactional group drain, no library
  (``drain_floor.py``: claim up to 50 ready rows, commit, mark them
  'sucesso', commit), on each engine at 1-4 clients every round, and the
  best of them in that round: what the engine itself allows on this
  machine, next to which our drains are read (ours / floor).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import bench_mysql  # noqa: E402 - the MariaDB/PostgreSQL harness next to this file
import graphile  # noqa: E402
from _harness import CLK_TCK, stop_processes, worker_ticks  # noqa: E402
from bench_mysql import BenchError, Database, running_workers, task_rows  # noqa: E402
from drain_floor import floor_drain  # noqa: E402

PG_DSN = os.environ.get("BENCH_PG_DSN", "host=127.0.0.1 user=postgres dbname=test")
MYSQL_DSN = os.environ.get("BENCH_MYSQL_DSN", "mysql://root:@127.0.0.1:3306/test")
PGQ_PREFIX = "nsjqbench_"
PGQ_TABLE = f"{PGQ_PREFIX}pgqueuer"
POLL = 0.01
# insert_task one per transaction against pgqueuer's enqueue of one job per call.
SINGLE_ENQUEUES = 2_000
SINGLE_ENQUEUE_ROWS = (
    f"enqueue {SINGLE_ENQUEUES:,} one per transaction: pgqueuer enqueue (tasks/s)",
    f"enqueue {SINGLE_ENQUEUES:,} one per transaction: ours insert_task (tasks/s)",
    f"enqueue {SINGLE_ENQUEUES:,} one per transaction: ours / pgqueuer (ratio)",
)
# pgqueuer's enqueue is an autocommitted INSERT: ours on an autocommit connection is the
# same transaction, one round trip (the rows above pay the caller's COMMIT too).
AUTOCOMMIT_ENQUEUE_ROWS = (
    f"enqueue {SINGLE_ENQUEUES:,} one per transaction: ours insert_task, autocommit (tasks/s)",
    f"enqueue {SINGLE_ENQUEUES:,} one per transaction: ours autocommit / pgqueuer (ratio)",
)
LATENCY_TASKS, LATENCY_WARMUP, LATENCY_RATE = 200, 20, 50.0  # one task every 20 ms
BACKLOG, BACKLOG_WINDOW = 50_000, 5_000  # the first 5,000 of a backlog of 50,000
GW_BEST = "graphile-worker best (1 process, concurrency 24, local queue 500, batched completion)"
GW_DEFAULT = "graphile-worker default (1 process, concurrency 1)"
GW_LATENCY_ROWS = [
    *(f"latency, {GW_BEST}: {q} (ms)" for q in ("p50", "p99")),
    *(f"latency {q}, ours default / graphile-worker best (ratio)" for q in ("p50", "p99")),
]

# Candidates screened once for each side's best configuration:
# ours: (processes, QUEUE_CONCURRENCY, QUEUE_BATCH_SIZE); pgqueuer: (processes, batch_size).
OURS_CANDIDATES = [(1, 1, 50), (2, 1, 50), (2, 1, 20), (2, 2, 25), (3, 1, 50)]
# ... and with QUEUE_ONE_WRITE (a fourth element, True: docs/internals/one-write.md).
OURS_CANDIDATES += [(1, 1, 50, True), (2, 1, 50, True), (3, 1, 50, True)]
PGQ_CANDIDATES = [(1, 50), (2, 50), (2, 10), (4, 50)]
# MariaDB: group commit is opt-in there (QUEUE_BATCH_SIZE), up to 200 (50 on PostgreSQL, for
# its subtransaction cache; the larger groups amortize MariaDB's cost per statement).
MARIA_CANDIDATES = [
    (2, 4, 1),
    (2, 1, 50),
    (4, 1, 50),
    (2, 2, 100),
    (2, 1, 200),
    (3, 1, 200),
    (4, 1, 200),
]
# The floor's client counts (drain_floor.py), each measured every round.
FLOOR_CLIENTS = [1, 2, 3, 4]
FLOOR_BATCH = 50


def ours_env(concurrency: int, batch: int | None, one_write: bool = False) -> dict[str, str]:
    env = {"QUEUE_CONCURRENCY": str(concurrency)}
    if batch is not None:
        env["QUEUE_BATCH_SIZE"] = str(batch)
    if one_write:
        env["QUEUE_ONE_WRITE"] = "true"
    return env


def held(c: tuple) -> bool:
    """Whether candidate ``c`` of ours runs with QUEUE_ONE_WRITE."""
    return len(c) > 3 and bool(c[3])


# -- pgqueuer ------------------------------------------------------------------------------


def _asyncpg_dsn(dsn: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(dsn)
    user = info.get("user") or "postgres"
    password = f":{info['password']}" if info.get("password") else ""
    host = info.get("host") or "127.0.0.1"
    return f"postgresql://{user}{password}@{host}:{info.get('port') or 5432}/{info.get('dbname')}"


def _pgq_queries(conn):
    from pgqueuer import AsyncpgDriver, Queries

    return Queries(AsyncpgDriver(conn))


async def _pgq_reset(dsn: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(_asyncpg_dsn(dsn))
    try:
        queries = _pgq_queries(conn)
        if await queries.schema_is_installed():
            await queries.uninstall()
        await queries.install()
    finally:
        await conn.close()


async def _pgq_enqueue(dsn: str, count: int) -> float:
    """pgqueuer's batch enqueue of ``count`` jobs (one call); seconds it took."""
    import asyncpg

    conn = await asyncpg.connect(_asyncpg_dsn(dsn))
    try:
        queries = _pgq_queries(conn)
        payloads: list[bytes | None] = [b'{"n": 1}'] * count
        t0 = time.perf_counter()
        await queries.enqueue(["noop"] * count, payloads, [0] * count)
        return time.perf_counter() - t0
    finally:
        await conn.close()


def pgq_reset(dsn: str) -> None:
    os.environ["PGQUEUER_PREFIX"] = PGQ_PREFIX
    asyncio.run(_pgq_reset(dsn))


@contextlib.contextmanager
def pgq_workers(
    dsn: str,
    processes: int,
    batch: int,
    log_dir: Path,
    latency_file: Path | None = None,
    wait_ready: bool = True,
) -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    ready = [log_dir / f"pgq.{time.monotonic_ns()}.{i}.ready" for i in range(processes)]
    env = dict(
        os.environ,
        PGQ_DSN=_asyncpg_dsn(dsn),
        PGQ_BATCH_SIZE=str(batch),
        PGQUEUER_PREFIX=PGQ_PREFIX,
    )
    if latency_file is not None:
        env["BENCH_LATENCY_FILE"] = str(latency_file)
    try:
        for marker in ready:
            log = open(log_dir / f"{marker.name}.log", "wb")
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(HERE / "pgqueuer_worker.py")],
                    env=dict(env, BENCH_READY_FILE=str(marker)),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        deadline = time.monotonic() + 30
        while wait_ready and not all(m.exists() for m in ready):
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                raise BenchError("a pgqueuer worker did not start")
            time.sleep(0.02)
        yield procs
    finally:
        stop_processes(procs, 30)


# -- measuring a drain ---------------------------------------------------------------------


@dataclass
class Drain:
    rate: float  # tasks/s, wall time from the commit
    after_first: float  # tasks/s from the first task done to the last
    # CPU of the worker processes per 1,000 tasks (ms), from the commit to the last task;
    # None where not measured (a backlog drain's includes the workers' start-up).
    worker_ms_per_1k: float | None = None


def with_worker_cpu(drain: Drain, pids: list[int], ticks_before: int, tasks: int) -> Drain:
    """``drain`` with the CPU ``pids`` used since ``ticks_before``, per 1,000 of ``tasks``."""
    used_ms = (worker_ticks(pids) - ticks_before) * 1000.0 / CLK_TCK
    drain.worker_ms_per_1k = used_ms * 1000.0 / tasks
    return drain


def watch(
    done: Callable[[], int],
    target: int,
    t0: float,
    timeout: float = 300.0,
    all_done: Callable[[], bool] | None = None,
) -> Drain:
    """Poll ``done()`` until it reaches ``target``; the rates since ``t0``.

    With ``all_done``, ``done()`` is polled only until the first task is done,
    then ``all_done()``: a probe that stops at the first unfinished row, where
    a count reads every row left. The watcher shares the two cores with the
    drain it times, and counting a MariaDB drain's remaining rows every 10 ms
    took about 5% of them (docs/benchmarks.md); the floor rows pay no watcher.
    """
    first_at = None
    while True:
        if first_at is not None and all_done is not None:
            count = target if all_done() else 0
        else:
            count = done()
        now = time.perf_counter()
        if count and first_at is None:
            first_at = now
        if count >= target:
            break
        if now - t0 > timeout:
            raise BenchError(f"only {count}/{target} done after {timeout:.0f} s")
        time.sleep(POLL)
    elapsed = now - t0
    after = (target - 1) / max(now - (first_at or t0), 1e-6)
    return Drain(target / elapsed, after)


def ours_drain(
    db: Database,
    processes: int,
    concurrency: int,
    batch: int | None,
    total: int,
    measured: int,
    log_dir: Path,
    extra: dict[str, str] | None = None,
    one_write: bool = False,
) -> Drain:
    """``total`` tasks committed at once for running workers; the first ``measured`` done."""
    from nsj_queue_lib import QueueClient

    env = {**ours_env(concurrency, batch, one_write), **(extra or {})}
    with (
        db.fresh_queue() as table,
        running_workers(db, table, processes, env, log_dir) as workers,
    ):
        pids = [p.pid for p in workers.procs]
        poll = db.connect(autocommit=True)
        conn = db.connect()
        try:
            all_done = None
            if measured == total:
                # Counts the unfinished rows (read through the partial indexes) until the first
                # task is done, then only asks whether one is left, as pgqueuer's side does.
                unfinished = True
                unfinished_rows = f"{table} WHERE status IN ('pendente', 'processando')"
                sql = f"SELECT count(*) FROM {unfinished_rows}"
                probe = f"SELECT 1 FROM {unfinished_rows} LIMIT 1"

                def all_done() -> bool:
                    return not db.execute(poll, probe)
            else:
                # The first ``measured`` of a backlog: the unfinished rows are the whole
                # backlog (50,000 rows, 10-20 ms a poll every 10 ms: half a core taken from
                # the drain). The settled rows instead, through their partial index (no
                # statistics right after the insert: the planner would read the table), so
                # the poll costs what it costs on an empty table.
                poll.execute("SET enable_seqscan = off")
                unfinished = False
                sql = (
                    f"SELECT count(*) FROM {table}"
                    " WHERE status NOT IN ('pendente', 'agendada', 'processando')"
                )

            def done() -> int:
                count = db.execute(poll, sql)[0][0]
                return total - count if unfinished else count

            QueueClient(conn, table).insert_tasks(task_rows(total))
            ticks = worker_ticks(pids)
            conn.commit()
            t0 = time.perf_counter()
            drain = with_worker_cpu(
                watch(done, measured, t0, all_done=all_done), pids, ticks, measured
            )
            # A drain only counts if its tasks succeeded: a failing handler settles fast too.
            failed = db.execute(
                poll,
                f"SELECT count(*) FROM {table}"
                " WHERE status NOT IN ('pendente', 'agendada', 'processando', 'sucesso')",
            )[0][0]
            if failed:
                raise BenchError(f"{failed} tasks did not end 'sucesso'")
            return drain
        finally:
            conn.close()
            poll.close()


def pgq_drain(dsn: str, processes: int, batch: int, total: int, log_dir: Path) -> Drain:
    import psycopg

    pgq_reset(dsn)
    with pgq_workers(dsn, processes, batch, log_dir) as procs:
        pids = [p.pid for p in procs]
        with psycopg.connect(dsn, autocommit=True) as poll:
            ticks = worker_ticks(pids)
            asyncio.run(_pgq_enqueue(dsn, total))
            t0 = time.perf_counter()
            sql = f"SELECT count(*) FROM {PGQ_TABLE}"
            probe = f"SELECT 1 FROM {PGQ_TABLE} LIMIT 1"
            drain = watch(
                lambda: total - poll.execute(sql).fetchone()[0],
                total,
                t0,
                all_done=lambda: poll.execute(probe).fetchone() is None,
            )
            return with_worker_cpu(drain, pids, ticks, total)


def ours_backlog(
    db: Database,
    processes: int,
    concurrency: int,
    batch: int | None,
    total: int,
    log_dir: Path,
    one_write: bool = False,
) -> Drain:
    """``total`` tasks committed first, then the workers started (as after a deploy or an
    outage): timed from their start until every task is done."""
    from nsj_queue_lib import QueueClient

    with db.fresh_queue() as table:
        conn, poll = db.connect(), db.connect(autocommit=True)
        try:
            QueueClient(conn, table).insert_tasks(task_rows(total))
            conn.commit()
            unfinished = f"{table} WHERE status IN ('pendente', 'processando')"
            t0 = time.perf_counter()
            env = ours_env(concurrency, batch, one_write)
            with running_workers(db, table, processes, env, log_dir, wait_ready=False):
                return watch(
                    lambda: total - db.execute(poll, f"SELECT count(*) FROM {unfinished}")[0][0],
                    total,
                    t0,
                    all_done=lambda: not db.execute(poll, f"SELECT 1 FROM {unfinished} LIMIT 1"),
                )
        finally:
            conn.close()
            poll.close()


def pgq_backlog(dsn: str, processes: int, batch: int, total: int, log_dir: Path) -> Drain:
    """pgqueuer's side of ``ours_backlog``."""
    import psycopg

    pgq_reset(dsn)
    asyncio.run(_pgq_enqueue(dsn, total))
    with psycopg.connect(dsn, autocommit=True) as poll:
        t0 = time.perf_counter()
        with pgq_workers(dsn, processes, batch, log_dir, wait_ready=False):
            return watch(
                lambda: total - poll.execute(f"SELECT count(*) FROM {PGQ_TABLE}").fetchone()[0],
                total,
                t0,
                all_done=lambda: (
                    poll.execute(f"SELECT 1 FROM {PGQ_TABLE} LIMIT 1").fetchone() is None
                ),
            )


def gw_drain(config: dict[str, str], total: int, log_dir: Path, backlog: bool) -> Drain:
    """graphile-worker's drain (one process), burst or backlog."""
    rate, after_first, ticks = graphile.drain(PG_DSN, 1, config, total, log_dir, backlog)
    cpu = None if backlog else ticks * 1000.0 / CLK_TCK * 1000.0 / total
    return Drain(rate, after_first, cpu)


def gw_latency(log_dir: Path) -> dict[str, float]:
    values = graphile.latency(
        PG_DSN, graphile.BEST, log_dir, LATENCY_TASKS, LATENCY_RATE, LATENCY_WARMUP
    )
    return {"p50": statistics.median(values), "p99": bench_mysql.percentile(values, 99)}


# -- latency -------------------------------------------------------------------------------


def _latencies(committed: dict[int, float], latency_file: Path, warmup: int) -> dict[str, float]:
    started = {}
    for line in latency_file.read_text().splitlines():
        task_id, at = line.split()
        started.setdefault(int(task_id), float(at))
    ordered = sorted(committed)[warmup:]
    values = [(started[i] - committed[i]) * 1000 for i in ordered if i in started]
    if len(values) < len(ordered):
        raise BenchError(f"{len(ordered) - len(values)} tasks never started")
    return {
        "p50": statistics.median(values),
        "p99": bench_mysql.percentile(values, 99),
    }


def ours_latency(db: Database, log_dir: Path) -> dict[str, float]:
    return bench_mysql.bench_latency(db, {}, LATENCY_TASKS, LATENCY_RATE, LATENCY_WARMUP, log_dir)


def pgq_latency(dsn: str, log_dir: Path) -> dict[str, float]:
    import asyncpg

    pgq_reset(dsn)
    latency_file = log_dir / f"pgq.{time.monotonic_ns()}.latency"

    async def enqueue_slowly() -> dict[int, float]:
        conn = await asyncpg.connect(_asyncpg_dsn(dsn))
        try:
            queries = _pgq_queries(conn)
            committed = {}
            interval = 1.0 / LATENCY_RATE
            start = time.perf_counter() + interval
            for i in range(LATENCY_TASKS + LATENCY_WARMUP):
                pause = start + i * interval - time.perf_counter()
                if pause > 0:
                    await asyncio.sleep(pause)
                [job_id] = await queries.enqueue("noop", b"{}")
                committed[int(job_id)] = time.time()
            return committed
        finally:
            await conn.close()

    with pgq_workers(dsn, 1, 10, log_dir, latency_file):
        committed = asyncio.run(enqueue_slowly())
        time.sleep(0.5)
    return _latencies(committed, latency_file, LATENCY_WARMUP)


# -- enqueue and the ceiling ---------------------------------------------------------------


def pgq_enqueue(dsn: str, count: int) -> float:
    pgq_reset(dsn)
    return count / asyncio.run(_pgq_enqueue(dsn, count))


def pgq_enqueue_single(dsn: str, count: int) -> float:
    """pgqueuer's ``enqueue`` of one job per call (each its own transaction), jobs/s."""
    import asyncpg

    pgq_reset(dsn)

    async def run() -> float:
        conn = await asyncpg.connect(_asyncpg_dsn(dsn))
        try:
            queries = _pgq_queries(conn)
            t0 = time.perf_counter()
            for _ in range(count):
                await queries.enqueue("noop", b'{"n": 1}')
            return time.perf_counter() - t0
        finally:
            await conn.close()

    return count / asyncio.run(run())


def ceiling(dsn: str, clients: int = 8, seconds: float = 2.0) -> float:
    """One-row UPDATE + commit transactions per second (pgbench's simple update, no queue)."""
    import psycopg

    table = f"nsjq_ceiling_{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP TABLE IF EXISTS {table}")
        admin.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n bigint NOT NULL)")
        admin.execute(f"INSERT INTO {table} SELECT g, 0 FROM generate_series(1, {clients}) g")
        counts = [0] * clients
        barrier = threading.Barrier(clients + 1)
        stop = threading.Event()

        def loop(i: int) -> None:
            with psycopg.connect(dsn) as conn:
                barrier.wait()
                while not stop.is_set():
                    conn.execute(f"UPDATE {table} SET n = n + 1 WHERE id = %s", (i + 1,))
                    conn.commit()
                    counts[i] += 1

        threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        admin.execute(f"DROP TABLE {table}")
    return sum(counts) / elapsed


# -- the run -------------------------------------------------------------------------------


def ours_best_label(c: tuple) -> str:
    one_write = ", QUEUE_ONE_WRITE" if held(c) else ""
    return f"ours best ({c[0]} x {c[1]}, QUEUE_BATCH_SIZE={c[2]}{one_write})"


def pgq_best_label(c: tuple) -> str:
    return f"pgqueuer best ({c[0]} processes, batch {c[1]})"


# Drains per candidate while screening, the candidates alternating: the best of them
# counts. One drain each could not tell configurations 10% apart on a 2-core VM.
SCREEN_TRIES = 2


def screen(label: str, candidates, measure) -> tuple:
    rates: dict[tuple, list[float]] = {cand: [] for cand in candidates}
    for _ in range(SCREEN_TRIES):
        for cand in candidates:
            rates[cand].append(measure(cand).rate)
    for cand, got in rates.items():
        print(f"  screening {label} {cand}: {', '.join(f'{r:,.0f}' for r in got)}/s", flush=True)
    return max(candidates, key=lambda cand: max(rates[cand]))


@dataclass
class Floors:
    """The floor rows (drain_floor.py): each engine at each client count of FLOOR_CLIENTS,
    every round, and its best of them in that round."""

    engines: list[Database]
    tasks: int

    def row(self, db: Database, clients: int) -> str:
        return f"floor, {db.label}: bare group drain SQL, {clients} clients (tasks/s)"

    def best_row(self, db: Database) -> str:
        return f"floor, {db.label}: best of {FLOOR_CLIENTS} clients in the round (tasks/s)"

    def names(self) -> list[str]:
        names = [self.row(db, c) for db in self.engines for c in FLOOR_CLIENTS]
        names += [self.best_row(db) for db in self.engines]
        names.append("PostgreSQL ours best / PostgreSQL floor best (ratio)")
        if len(self.engines) > 1:
            names += [
                "MariaDB floor best / PostgreSQL ours best (ratio)",
                "MariaDB ours best / MariaDB floor best (ratio)",
            ]
        return names

    def measure_round(self, r, add, pg_best: float, maria_best: float | None) -> None:
        floor = {}
        for db in self.engines if r % 2 else self.engines[::-1]:
            counts = FLOOR_CLIENTS if r % 2 else FLOOR_CLIENTS[::-1]
            rates = [floor_drain(db, c, self.tasks, FLOOR_BATCH) for c in counts]
            for clients, rate in zip(counts, rates, strict=True):
                add(self.row(db, clients), rate)
            floor[db.kind] = max(rates)
            add(self.best_row(db), floor[db.kind])
        add("PostgreSQL ours best / PostgreSQL floor best (ratio)", pg_best / floor["postgres"])
        if maria_best is not None:
            add("MariaDB floor best / PostgreSQL ours best (ratio)", floor["mariadb"] / pg_best)
            add("MariaDB ours best / MariaDB floor best (ratio)", maria_best / floor["mariadb"])


def add_graphile_drains(
    drains: dict[str, Callable[[], Drain]],
    backlogs: dict[str, Callable[[], Drain]],
    n: int,
    log_dir: Path,
) -> None:
    """graphile-worker's rows, best configuration and defaults, in both scenarios."""
    for scenario, rows in (("drain", drains), ("backlog drain", backlogs)):
        backlog = scenario != "drain"
        rows[f"{scenario}, {GW_BEST}"] = lambda b=backlog: gw_drain(graphile.BEST, n, log_dir, b)
        rows[f"{scenario}, {GW_DEFAULT}"] = lambda b=backlog: gw_drain(
            graphile.DEFAULTS, n, log_dir, b
        )


def against_graphile(
    o: tuple, p: tuple, ob: tuple, pb: tuple, skipped: str | None
) -> list[tuple[str, str, str]]:
    """(ratio's row, ours, theirs) by row name: the backlog scenario against pgqueuer, and
    both scenarios against graphile-worker (issue 40's targets). ``o``, ``p``: each side's
    best burst configuration; ``ob``, ``pb``: its best backlog configuration."""
    after = ("", ", after the first task")
    named = [
        (f"backlog drain, ours best / pgqueuer best{a} (ratio)",
         f"backlog drain, {ours_best_label(ob)}{a}", f"backlog drain, {pgq_best_label(pb)}{a}")
        for a in after
    ]  # fmt: skip
    if skipped:
        return named
    for s, best in (("drain", ours_best_label(o)), ("backlog drain", ours_best_label(ob))):
        named += [
            (f"{s}, ours best / graphile-worker best{a} (ratio)", f"{s}, {best}{a}",
             f"{s}, {GW_BEST}{a}")
            for a in after
        ]  # fmt: skip
        named.append(
            (
                f"{s}, ours default / graphile-worker default (ratio)",
                f"{s}, ours default (1 process, default settings)",
                f"{s}, {GW_DEFAULT}",
            )
        )
    return named


def latencies(
    r: int,
    pg: Database,
    log_dir: Path,
    skipped: str | None,
    add: Callable[[str, float], None],
    results: dict[str, list[float]],
) -> None:
    """One round's latency rows, the order alternating between rounds."""
    lat = [
        ("pgqueuer default", lambda: pgq_latency(PG_DSN, log_dir)),
        ("ours default", lambda: ours_latency(pg, log_dir)),
    ]
    if not skipped:
        lat.append((GW_BEST, lambda: gw_latency(log_dir)))
    for who, fn in lat if r % 2 == 0 else reversed(lat):
        values = fn()
        add(f"latency, {who}: p50 (ms)", values["p50"])
        add(f"latency, {who}: p99 (ms)", values["p99"])
    if not skipped:
        for q in ("p50", "p99"):
            ours_q = results[f"latency, ours default: {q} (ms)"][-1]
            theirs_q = results[f"latency, {GW_BEST}: {q} (ms)"][-1]
            add(f"latency {q}, ours default / graphile-worker best (ratio)", ours_q / theirs_q)


def graphile_ready(refused: bool) -> str | None:
    """None once graphile-worker is installed; else why its rows are skipped (said)."""
    skipped = "--no-graphile" if refused else graphile.unavailable()
    if skipped:
        print(f"graphile-worker's rows are skipped: {skipped}", flush=True)
        return skipped
    graphile.install()
    print(f"graphile-worker {graphile.VERSION} (node from the machine)", flush=True)
    return None


def enqueue_rows(r: int, pg: Database, add: Callable[[str, float], None]) -> None:
    """Round ``r``'s enqueue rows: in bulk, and one task per transaction (which side goes
    first alternates from round to round)."""
    for count in (5_000, 50_000):
        theirs = pgq_enqueue(PG_DSN, count)
        ours = bench_mysql.bench_enqueue_bulk(pg, count)
        add(f"enqueue {count:,}: pgqueuer batch enqueue (tasks/s)", theirs)
        add(f"enqueue {count:,}: ours insert_tasks (tasks/s)", ours)
        add(f"enqueue {count:,}: ours / pgqueuer (ratio)", ours / theirs)
    pair_single = {
        "theirs": lambda: pgq_enqueue_single(PG_DSN, SINGLE_ENQUEUES),
        "ours": lambda: bench_mysql.bench_enqueue_single(pg, SINGLE_ENQUEUES),
        "autocommit": lambda: bench_mysql.bench_enqueue_single(pg, SINGLE_ENQUEUES, True),
    }
    single = {k: pair_single[k]() for k in (list(pair_single)[:: 1 if r % 2 else -1])}
    theirs_row, ours_row, ratio_row = SINGLE_ENQUEUE_ROWS
    add(theirs_row, single["theirs"])
    add(ours_row, single["ours"])
    add(ratio_row, single["ours"] / single["theirs"])
    autocommit_row, autocommit_ratio_row = AUTOCOMMIT_ENQUEUE_ROWS
    add(autocommit_row, single["autocommit"])
    add(autocommit_ratio_row, single["autocommit"] / single["theirs"])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--quick", action="store_true", help="2 rounds of 2,000 tasks")
    ap.add_argument("--markdown", type=Path, help="also write the table here")
    ap.add_argument("--no-mariadb", action="store_true")
    ap.add_argument("--no-graphile", action="store_true")
    ap.add_argument(
        "--latency-only", action="store_true", help="only the latency rows, --rounds rounds"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.tasks = 2, 2000
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pg = Database("postgres", PG_DSN)
    maria = None if args.no_mariadb else Database("mariadb", MYSQL_DSN)
    n = args.tasks
    log_dir = Path(tempfile.mkdtemp(prefix="nsjq-bench-pgq-"))
    import pgqueuer

    print(f"pgqueuer {pgqueuer.__version__}; logs in {log_dir}", flush=True)
    skipped = graphile_ready(args.no_graphile)
    if args.latency_only:
        return latency_only(args.rounds, pg, log_dir, skipped, args.markdown)

    ours_best = screen(
        "ours (processes, concurrency, batch)",
        OURS_CANDIDATES,
        lambda c: ours_drain(pg, c[0], c[1], c[2], n, n, log_dir, one_write=held(c)),
    )
    pgq_best = screen(
        "pgqueuer (processes, batch)",
        PGQ_CANDIDATES,
        lambda c: pgq_drain(PG_DSN, c[0], c[1], n, log_dir),
    )
    maria_extra = {"QUEUE_POLL_INTERVAL": "0.1"}
    maria_best = None
    if maria is not None:
        maria_best = screen(
            "MariaDB ours (processes, concurrency, batch)",
            MARIA_CANDIDATES,
            lambda c: ours_drain(maria, c[0], c[1], c[2], n, n, log_dir, maria_extra),
        )
    # The backlog scenario's own best configurations: more processes drain a burst faster
    # but start more slowly.
    ob = screen(
        "ours, backlog (processes, concurrency, batch)",
        OURS_CANDIDATES,
        lambda c: ours_backlog(pg, c[0], c[1], c[2], n, log_dir, one_write=held(c)),
    )
    pb = screen(
        "pgqueuer, backlog (processes, batch)",
        PGQ_CANDIDATES,
        lambda c: pgq_backlog(PG_DSN, c[0], c[1], n, log_dir),
    )
    floors = Floors([pg] if maria is None else [pg, maria], n)
    o, p = ours_best, pgq_best
    drains: dict[str, Callable[[], Drain]] = {
        "drain, pgqueuer default (1 process, batch 10)": lambda: pgq_drain(
            PG_DSN, 1, 10, n, log_dir
        ),
        f"drain, pgqueuer best ({p[0]} processes, batch {p[1]})": lambda: pgq_drain(
            PG_DSN, p[0], p[1], n, log_dir
        ),
        "drain, ours default (1 process, default settings)": lambda: ours_drain(
            pg, 1, 1, None, n, n, log_dir
        ),
        "drain, ours 1 process, QUEUE_BATCH_SIZE=20": lambda: ours_drain(
            pg, 1, 1, 20, n, n, log_dir
        ),
        f"drain, {ours_best_label(o)}": lambda: ours_drain(
            pg, o[0], o[1], o[2], n, n, log_dir, one_write=held(o)
        ),
    }
    # The backlog scenario (issue 40): tasks committed first, workers started afterwards.
    backlogs: dict[str, Callable[[], Drain]] = {
        f"backlog drain, {pgq_best_label(pb)}": lambda: pgq_backlog(
            PG_DSN, pb[0], pb[1], n, log_dir
        ),
        "backlog drain, pgqueuer default (1 process, batch 10)": lambda: pgq_backlog(
            PG_DSN, 1, 10, n, log_dir
        ),
        f"backlog drain, {ours_best_label(ob)}": lambda: ours_backlog(
            pg, ob[0], ob[1], ob[2], n, log_dir, one_write=held(ob)
        ),
        "backlog drain, ours default (1 process, default settings)": lambda: ours_backlog(
            pg, 1, 1, None, n, log_dir
        ),
    }
    if not skipped:
        add_graphile_drains(drains, backlogs, n, log_dir)
    cpu_rows = {d: f"{d}: worker CPU per 1,000 tasks (ms)" for d in drains}
    drains.update(backlogs)
    results: dict[str, list[float]] = {}
    names = [
        "ceiling: one-row UPDATE + commit, 8 clients (tx/s)",
        *[f"{d} (tasks/s)" for d in drains],
        *[f"{d}, after the first task (tasks/s)" for d in drains],
        *cpu_rows.values(),
        "latency, pgqueuer default: p50 (ms)",
        "latency, pgqueuer default: p99 (ms)",
        "latency, ours default: p50 (ms)",
        "latency, ours default: p99 (ms)",
        "backlog 50,000, first 5,000, ours best (tasks/s)",
        "backlog reference: 5,000 from an empty table, ours best (tasks/s)",
        "backlog / empty table, ours best (ratio)",
        "enqueue 5,000: pgqueuer batch enqueue (tasks/s)",
        "enqueue 5,000: ours insert_tasks (tasks/s)",
        "enqueue 50,000: pgqueuer batch enqueue (tasks/s)",
        "enqueue 50,000: ours insert_tasks (tasks/s)",
        *SINGLE_ENQUEUE_ROWS,
        *AUTOCOMMIT_ENQUEUE_ROWS,
    ]
    ratios = [
        ("ours best / pgqueuer best, wall (ratio)", 4, 1, ""),
        ("ours best / pgqueuer best, after the first task (ratio)", 4, 1, ", after the first task"),
        ("ours default / pgqueuer default (ratio)", 2, 0, ""),
        ("ours 1 process QUEUE_BATCH_SIZE=20 / pgqueuer default (ratio)", 3, 0, ""),
    ]
    names += [r[0] for r in ratios]
    named_ratios = against_graphile(o, p, ob, pb, skipped)
    names += [r[0] for r in named_ratios]
    names += [] if skipped else GW_LATENCY_ROWS
    names += [f"enqueue {c:,}: ours / pgqueuer (ratio)" for c in (5_000, 50_000)]
    if maria is not None:
        maria_row = (
            f"drain, MariaDB ours best ({maria_best[0]} x {maria_best[1]}, "
            f"QUEUE_BATCH_SIZE={maria_best[2]}, poll 0.1 s) (tasks/s)"
        )
        # After the first task too: MariaDB has no LISTEN, so its workers find the batch
        # at their next poll (0.1 s), a start-up PostgreSQL's notification does not pay.
        names += [
            maria_row,
            f"{maria_row[: -len(' (tasks/s)')]}, after the first task (tasks/s)",
            "MariaDB best / PostgreSQL ours best (ratio)",
            "MariaDB best / PostgreSQL ours best, after the first task (ratio)",
        ]

    names += floors.names()
    for name in names:
        results[name] = []

    def add(name: str, value: float) -> None:
        results[name].append(value)

    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", flush=True)
        order = list(drains.items())
        if r % 2:
            order.reverse()
        add(names[0], ceiling(PG_DSN))
        for label, fn in order:
            d = fn()
            add(f"{label} (tasks/s)", d.rate)
            add(f"{label}, after the first task (tasks/s)", d.after_first)
            if label in cpu_rows and d.worker_ms_per_1k is not None:
                add(cpu_rows[label], d.worker_ms_per_1k)
        labels = list(drains)
        for name, ours_i, theirs_i, suffix in ratios:
            ours_v = results[f"{labels[ours_i]}{suffix} (tasks/s)"][-1]
            theirs_v = results[f"{labels[theirs_i]}{suffix} (tasks/s)"][-1]
            add(name, ours_v / theirs_v)
        for name, ours_row, theirs_row in named_ratios:
            add(name, results[f"{ours_row} (tasks/s)"][-1] / results[f"{theirs_row} (tasks/s)"][-1])
        latencies(r, pg, log_dir, skipped, add, results)
        pair = {
            "backlog": lambda: (
                ours_drain(pg, *o[:3], BACKLOG, BACKLOG_WINDOW, log_dir, one_write=held(o)).rate
            ),
            "empty": lambda: (
                ours_drain(
                    pg, *o[:3], BACKLOG_WINDOW, BACKLOG_WINDOW, log_dir, one_write=held(o)
                ).rate
            ),
        }
        rates = {k: pair[k]() for k in (list(pair) if r % 2 else list(pair)[::-1])}
        add("backlog 50,000, first 5,000, ours best (tasks/s)", rates["backlog"])
        add("backlog reference: 5,000 from an empty table, ours best (tasks/s)", rates["empty"])
        add("backlog / empty table, ours best (ratio)", rates["backlog"] / rates["empty"])
        pg_best_row = f"drain, {ours_best_label(o)}"
        best_now = results[f"{pg_best_row} (tasks/s)"][-1]
        best_after_now = results[f"{pg_best_row}, after the first task (tasks/s)"][-1]
        enqueue_rows(r, pg, add)
        if maria is not None and maria_best is not None:
            m = maria_best
            drain = ours_drain(maria, m[0], m[1], m[2], n, n, log_dir, maria_extra)
            add(maria_row, drain.rate)
            add(
                f"{maria_row[: -len(' (tasks/s)')]}, after the first task (tasks/s)",
                drain.after_first,
            )
            add("MariaDB best / PostgreSQL ours best (ratio)", drain.rate / best_now)
            add(
                "MariaDB best / PostgreSQL ours best, after the first task (ratio)",
                drain.after_first / best_after_now,
            )
        maria_now = results[maria_row][-1] if maria is not None else None
        floors.measure_round(r, add, best_now, maria_now)
    table = render(results, args.rounds, n)
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n")
    return 0


def latency_only(
    rounds: int, pg: Database, log_dir: Path, skipped: str | None, markdown: Path | None
) -> int:
    """The latency rows alone, in the same paired rounds as a full run's."""
    results: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    for r in range(rounds):
        print(f"round {r + 1}/{rounds}", flush=True)
        latencies(r, pg, log_dir, skipped, add, results)
    table = render(results, rounds, LATENCY_TASKS, "tasks per side, one every 20 ms")
    print(table)
    if markdown:
        markdown.write_text(table + "\n")
    return 0


def render(
    results: dict[str, list[float]], rounds: int, tasks: int, unit: str = "tasks per drain"
) -> str:
    lines = [
        f"| row ({tasks:,} {unit}, {rounds} paired rounds) | median | min | max |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, values in results.items():
        if not values:
            continue
        fmt = "{:,.2f}" if ("ms" in name or "ratio" in name) else "{:,.0f}"
        med = statistics.median(values)
        lines.append(
            f"| {name} | {fmt.format(med)} | {fmt.format(min(values))} | {fmt.format(max(values))} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
