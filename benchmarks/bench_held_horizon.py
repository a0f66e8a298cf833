"""A steady stream under a held horizon (PostgreSQL), per minute: does the drain decay?

For each engine in turn, another session holds a REPEATABLE READ snapshot for
``--minutes`` while tasks arrive at ``--rate`` per second (a batch every 100 ms) and one
worker process drains them. Per minute it prints the tasks finished, the p50 and p99
latency, and the size of the table that holds the unfinished work. After the snapshot
ends it samples that size every second for two maintenance cycles (10 s each): when it
came back within 1 MB of its start size, and where it ended.

Engines (``--engines``, in this order by default):

- ``partitioned`` and ``plain``: this library, one process, ``QUEUE_CONCURRENCY=2``, the
  vacuum service every 10 s. Arrivals are ``INSERT``s of 50 rows. Latency runs from the
  row's ``data_hora`` to its ``finished_at`` (one clock, the database's). The table: the
  hot partition, or the whole queue table.
- ``pgqueuer``: pgqueuer 1.6 (``make bench`` installs it), one process, batch 10.
  Arrivals are its ``enqueue`` of 50 jobs. Latency runs from ``enqueue``'s return to the
  handler's start (the worker's clock: the same machine), so it leaves out pgqueuer's
  completion commit. The table: its queue table (its log table keeps the history). This
  server runs with autovacuum off, so the harness VACUUMs pgqueuer's tables every 10 s,
  as the library's vacuum service does its own.

The issue's target (issue 39): minute 9's drain and p99 at least 0.8x of minute 1's,
and the hot table back to its start size within one maintenance cycle.

    .venv/bin/python benchmarks/bench_held_horizon.py --minutes 10 --rate 500
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import DEFAULT_DSN, connect, fresh_queue, running_workers  # noqa: E402

MAINTENANCE_INTERVAL = 10.0
TICK = 0.1


@dataclass
class Minute:
    finished: int
    p50_ms: float
    p99_ms: float
    table_bytes: int


@dataclass
class Session:
    engine: str
    start_bytes: int = 0
    minutes: list[Minute] = field(default_factory=list)
    after_bytes: int = 0
    back_after_s: float | None = None  # seconds after the snapshot ended until back near start


def _paced(rate: int, stop: threading.Event, send: Callable[[int], None]) -> None:
    per_tick = max(1, int(rate * TICK))
    next_tick = time.monotonic()
    while not stop.is_set():
        send(per_tick)
        next_tick += TICK
        stop.wait(max(0.0, next_tick - time.monotonic()))


def _table_bytes(conn, table: str) -> int:
    return int(conn.execute("SELECT pg_total_relation_size(%s)", (table,)).fetchone()[0])


def _print_minute(number: int, m: Minute) -> None:
    print(
        f"{number:6d}  {m.finished:8d}  {m.p50_ms:7.1f}  {m.p99_ms:8.1f}"
        f"  {m.table_bytes / 1e6:7.1f} MB",
        flush=True,
    )


def _settle(session: Session, size: Callable[[], int]) -> None:
    """Two maintenance cycles after the snapshot ended, sampled every second: the size at
    the end, and when it first came back within 1 MB of the start."""
    ended = time.monotonic()
    while time.monotonic() - ended < 2 * MAINTENANCE_INTERVAL:
        time.sleep(1.0)
        session.after_bytes = size()
        if session.back_after_s is None and session.after_bytes <= session.start_bytes + 1e6:
            session.back_after_s = time.monotonic() - ended


def _held(dsn: str, table: str):
    holder = connect(dsn)
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    holder.execute(f"SELECT count(*) FROM {table}").fetchone()
    return holder


def _run_minutes(
    session: Session,
    minutes: int,
    measure: Callable[[float, float], tuple[int, float, float]],
    size: Callable[[], int],
) -> None:
    print("minute  finished   p50 ms    p99 ms   table")
    began = time.time()
    for minute in range(minutes):
        end = began + 60 * (minute + 1)
        time.sleep(max(0.0, end - time.time()))
        done, p50, p99 = measure(end - 60, end)
        session.minutes.append(Minute(done, p50, p99, size()))
        _print_minute(minute + 1, session.minutes[-1])


# -- this library --------------------------------------------------------------------------


def ours(dsn: str, layout: str, minutes: int, rate: int, logs: Path) -> Session:
    session = Session(layout)
    partitioned = layout == "partitioned"
    env = {
        "QUEUE_VACUUM_INTERVAL": str(MAINTENANCE_INTERVAL),
        "QUEUE_VACUUM_DEAD_ROWS": "10000",
    }
    with fresh_queue(dsn, layout) as name, connect(dsn, autocommit=True) as admin:
        table = f"public.{name}"
        hot = f"{table}_hot" if partitioned else table
        session.start_bytes = _table_bytes(admin, hot)

        def measure(since: float, until: float) -> tuple[int, float, float]:
            row = admin.execute(
                "SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY "
                "extract(epoch FROM finished_at - data_hora)), percentile_cont(0.99) WITHIN "
                "GROUP (ORDER BY extract(epoch FROM finished_at - data_hora)) "
                f"FROM {table} WHERE status = 'sucesso' "
                "AND finished_at >= to_timestamp(%s) AND finished_at < to_timestamp(%s)",
                (since, until),
            ).fetchone()
            return int(row[0]), float(row[1] or 0) * 1000, float(row[2] or 0) * 1000

        with running_workers(dsn, name, 1, 2, logs, env), connect(dsn, autocommit=True) as feed:

            def send(count: int) -> None:
                feed.execute(
                    f"INSERT INTO {table} (processo, payload) "
                    "SELECT 'bench', '{}' FROM generate_series(1, %s)",
                    (count,),
                )

            holder = _held(dsn, table)
            stop = threading.Event()
            feeder = threading.Thread(target=_paced, args=(rate, stop, send))
            feeder.start()
            try:
                _run_minutes(session, minutes, measure, lambda: _table_bytes(admin, hot))
            finally:
                stop.set()
                feeder.join()
                holder.rollback()
                holder.close()
            _settle(session, lambda: _table_bytes(admin, hot))
    return session


# -- pgqueuer ------------------------------------------------------------------------------


def pgqueuer(dsn: str, minutes: int, rate: int, logs: Path) -> Session:
    import asyncpg
    from bench_pgqueuer import PGQ_TABLE, _asyncpg_dsn, _pgq_queries, pgq_reset, pgq_workers

    session = Session("pgqueuer")
    pgq_reset(dsn)
    handled = logs / "pgqueuer.handled"
    enqueued: dict[int, float] = {}
    tables = (PGQ_TABLE, f"{PGQ_TABLE}_log", f"{PGQ_TABLE}_statistics")
    with connect(dsn, autocommit=True) as admin:
        session.start_bytes = _table_bytes(admin, PGQ_TABLE)

        def measure(since: float, until: float) -> tuple[int, float, float]:
            waits = []
            for line in handled.read_text().splitlines() if handled.exists() else []:
                job, _, at = line.partition(" ")
                ran = float(at)
                if since <= ran < until and int(job) in enqueued:
                    waits.append((ran - enqueued[int(job)]) * 1000)
            if len(waits) < 2:
                return len(waits), 0.0, 0.0
            cuts = statistics.quantiles(waits, n=100)
            return len(waits), cuts[49], cuts[98]

        async def feed(stop: threading.Event) -> None:
            conn = await asyncpg.connect(_asyncpg_dsn(dsn))
            queries = _pgq_queries(conn)
            try:
                per_tick = max(1, int(rate * TICK))
                next_tick = time.monotonic()
                while not stop.is_set():
                    ids = await queries.enqueue(
                        ["noop"] * per_tick, [b"{}"] * per_tick, [0] * per_tick
                    )
                    now = time.time()
                    for job in ids:
                        enqueued[int(job)] = now
                    next_tick += TICK
                    await asyncio.sleep(max(0.0, next_tick - time.monotonic()))
            finally:
                await conn.close()

        def vacuum(stop: threading.Event) -> None:
            with connect(dsn, autocommit=True) as conn:
                while not stop.wait(MAINTENANCE_INTERVAL):
                    for table in tables:
                        conn.execute(f"VACUUM (ANALYZE) {table}")

        with pgq_workers(dsn, 1, 10, logs, latency_file=handled):
            holder = _held(dsn, PGQ_TABLE)
            stop, vacuum_stop = threading.Event(), threading.Event()
            feeder = threading.Thread(target=lambda: asyncio.run(feed(stop)))
            vacuumer = threading.Thread(target=vacuum, args=(vacuum_stop,))
            feeder.start()
            vacuumer.start()
            try:
                _run_minutes(session, minutes, measure, lambda: _table_bytes(admin, PGQ_TABLE))
            finally:
                stop.set()
                feeder.join()
                holder.rollback()
                holder.close()
            _settle(session, lambda: _table_bytes(admin, PGQ_TABLE))
            vacuum_stop.set()
            vacuumer.join()
    return session


# -- the report ----------------------------------------------------------------------------


def summary(sessions: list[Session], minutes: int) -> None:
    late = min(9, minutes) - 1  # minute 9, or the last when shorter
    print(
        f"\nminute {late + 1} against minute 1 (target: drain and p99 at least 0.8x), "
        "and the table after the snapshot"
    )
    print(
        "engine        drain  p99 (minute 1's / this one's)  start MB   peak MB   after MB"
        "   back within 1 MB of start"
    )
    for s in sessions:
        if len(s.minutes) <= late:
            continue
        first, last = s.minutes[0], s.minutes[late]
        drain = last.finished / first.finished if first.finished else 0.0
        p99 = first.p99_ms / last.p99_ms if last.p99_ms else 0.0
        peak = max(m.table_bytes for m in s.minutes)
        back = "no" if s.back_after_s is None else f"after {s.back_after_s:.0f} s"
        print(
            f"{s.engine:12} {drain:6.2f}  {p99:6.2f}                         "
            f"{s.start_bytes / 1e6:8.1f}  {peak / 1e6:8.1f}  {s.after_bytes / 1e6:9.1f}   {back}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument(
        "--engines",
        default="partitioned,plain,pgqueuer",
        help="comma-separated, run in this order: partitioned, plain, pgqueuer",
    )
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = set(engines) - {"partitioned", "plain", "pgqueuer"}
    if unknown:
        parser.error(f"unknown engines: {', '.join(sorted(unknown))}")
    print(
        f"bench_held_horizon: {args.rate} tasks/s for {args.minutes} min per engine, "
        f"a REPEATABLE READ snapshot held; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    sessions = []
    with tempfile.TemporaryDirectory(prefix="nsj_bench_horizon_") as logs:
        for engine in engines:
            print(f"\n== {engine}", flush=True)
            if engine == "pgqueuer":
                sessions.append(pgqueuer(args.dsn, args.minutes, args.rate, Path(logs)))
            else:
                sessions.append(ours(args.dsn, engine, args.minutes, args.rate, Path(logs)))
            s = sessions[-1]
            print(
                f"after the snapshot and two maintenance cycles: table {s.after_bytes / 1e6:.1f} MB"
                f" (start {s.start_bytes / 1e6:.1f} MB)",
                flush=True,
            )
    summary(sessions, args.minutes)


if __name__ == "__main__":
    main()
