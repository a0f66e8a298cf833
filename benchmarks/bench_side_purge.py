"""The purge of the side tables (db/side_store.py) against the side tables' size: what the
purge service's run spends on the side rows of ``--purged`` expired tasks, next to
``--sizes`` live tasks whose side rows it must leave alone, on PostgreSQL and MariaDB, in
both layouts.

Every task, live or expired, has one row in each side table: a checkpoint (_steps), an
event (_events), an edge to the next task (_parents), a waiting row (_waiting), a
workflow of its own (_workflows, _workflow_tasks) and a process task (_process_tasks).
The live tasks are 'pendente' (hot partition); the expired ones finished 40 days ago
(plain: their data_hora; partitioned: a day partition 40 days old).

Printed per database, layout and size: the run's wall time, the side purge's own time
(the ``SidePurge`` calls) and statements, and, for contrast, one probe of the anti-join
the side purge replaced (``workflow/steps.py``'s ``purge_orphans`` before: the tasks of
checkpoints whose first attempt is gone, read after every run that deleted rows).

    .venv/bin/python benchmarks/bench_side_purge.py --sizes 10000 200000 --purged 5000
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import DEFAULT_DSN  # noqa: E402
from bench_mysql import DEFAULT_MYSQL_DSN, Database  # noqa: E402
from bench_retention_mysql import old_day  # noqa: E402

from nsj_queue_lib.db.side_store import SidePurge, SideStore  # noqa: E402

MAX_AGE_DAYS = 30
PURGE_LIMIT = 1000
EXPIRED = 40
SIDE_SUFFIXES = ("_steps", "_events", "_processes", "_process_tasks", "_process_events")
# The checkpoint probe the side purge replaced (it read the whole table when none was left).
OLD_PROBE = (
    "SELECT DISTINCT s.task_id FROM {table}_steps AS s "
    "WHERE NOT EXISTS (SELECT 1 FROM {table} AS q WHERE q.id = s.task_id) LIMIT 1000"
)


def series(db: Database, first: int, last: int) -> str:
    """Rows ``n`` from ``first`` to ``last``."""
    if db.kind == "postgres":
        return f"generate_series({first}, {last}) AS s(n)"
    return f"(SELECT seq AS n FROM seq_{first}_to_{last}) AS s"


def fill(db: Database, table: str, live: int, purged: int) -> None:
    admin = db.connect(autocommit=True)
    try:
        day_column = day_value = ""
        if db.layout == "partitioned":
            day = _old_day(db, admin, table)
            day_column, day_value = ", finished_day", f", {day}"
        ago = (
            f"clock_timestamp() - interval '{EXPIRED} days'"
            if db.kind == "postgres"
            else f"NOW(6) - INTERVAL {EXPIRED} DAY"
        )
        now = "clock_timestamp()" if db.kind == "postgres" else "NOW(6)"
        # ids 1..purged: expired and finished; purged+1..purged+live: live, untouched.
        db.execute(
            admin,
            f"INSERT INTO {table} (id, processo, payload, status, data_hora, data_hora_inicial"
            f"{day_column}) SELECT n, 'p', 'x', 'sucesso', {ago}, {ago}{day_value} "
            f"FROM {series(db, 1, purged)}",
        )
        db.execute(
            admin,
            f"INSERT INTO {table} (id, processo, payload, status, data_hora, data_hora_inicial) "
            f"SELECT n, 'p', 'x', 'pendente', {now}, {now} "
            f"FROM {series(db, purged + 1, purged + live)}",
        )
        every = series(db, 1, purged + live)
        for sql in (
            f"INSERT INTO {table}_steps (task_id, name, result, attempt_id) "
            f"SELECT n, 's', '1', n FROM {every}",
            f"INSERT INTO {table}_events (task_id, name) SELECT n, 'e' FROM {every}",
            f"INSERT INTO {table}_parents (parent_id, child_id) SELECT n, n + 1 FROM {every}",
            f"INSERT INTO {table}_waiting (child_id, pending_parents) SELECT n, 0 FROM {every}",
            f"INSERT INTO {table}_workflows (id, name) SELECT n, 'w' FROM {every}",
            f"INSERT INTO {table}_workflow_tasks (workflow_id, seq, task_id) "
            f"SELECT n, 0, n FROM {every}",
            f"INSERT INTO {table}_processes (process_id, processo, state) VALUES ('p', 'p', '{{}}')",
            f"INSERT INTO {table}_process_tasks (task_id, process_id, kind) "
            f"SELECT n, 'p', 'call' FROM {every}",
        ):
            db.execute(admin, sql)
        if db.kind == "postgres":
            db.execute(
                admin,
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), {purged + live + 1})",
            )
            for suffix in (
                "",
                "_steps",
                "_events",
                "_parents",
                "_waiting",
                "_workflows",
                "_workflow_tasks",
                "_process_tasks",
            ):
                db.execute(admin, f"VACUUM ANALYZE {table}{suffix}")
        else:
            db.execute(
                admin,
                f"ANALYZE TABLE {table}, {table}_steps, {table}_events, "
                f"{table}_parents, {table}_workflow_tasks, {table}_process_tasks",
            )
    finally:
        admin.close()


def _old_day(db: Database, admin: Any, table: str) -> int:
    if db.kind == "postgres":
        today = db.execute(
            admin, "SELECT (clock_timestamp() AT TIME ZONE 'UTC')::date - DATE '1970-01-01'"
        )[0][0]
        day = today - EXPIRED
        db.execute(
            admin,
            f"CREATE TABLE {table}_p{day} PARTITION OF {table} "
            f"FOR VALUES FROM ({day}) TO ({day + 1})",
        )
        return int(day)
    return old_day(db, admin, table, EXPIRED)


def store_of(db: Database, table: str, conn: Any) -> Any:
    if db.kind == "postgres":
        from nsj_queue_lib.db.postgres.store import PostgresQueueStore

        store: Any = PostgresQueueStore(table)
        # The counters of the transaction as they are at each read, not as first read.
        conn.execute("SET stats_fetch_consistency = 'none'")
    else:
        from nsj_queue_lib.db.mysql.driver import configure_session
        from nsj_queue_lib.db.mysql.store import MysqlQueueStore

        configure_session(conn, executor=False)
        store = MysqlQueueStore(table)
    store.bind(conn)
    conn.commit()
    return store


# Rows the server read, as its own counters say (whatever the load on the machine):
# PostgreSQL's of the current transaction (every table of the queue, partitions too),
# MariaDB's of the session (handler reads: by key, next in an index, next in a scan).
PG_READ = (
    "SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0), "
    "coalesce(sum(seq_scan), 0) FROM pg_stat_xact_user_tables "
    "WHERE schemaname = %s AND relname LIKE %s"
)
# (SHOW's own reads are counted too: measured once and taken off)
MARIADB_READ = "SHOW SESSION STATUS LIKE 'Handler_read%%'"


class Counted:
    """The side purge's statements (each a cursor of SideStore's), its time (the calls
    the purge makes of SidePurge) and the rows the server read for it (around each
    ``clear``, in its transaction): all rows read, and the full scans (PostgreSQL: their
    number; MariaDB: the rows they read)."""

    def __init__(self, sides: SidePurge, table: str):
        self.statements = 0
        self.seconds = 0.0
        self.rows_read = 0
        self.scans = 0
        self.by_statement: dict[str, float] = {}
        self.rows_by_statement: dict[str, int] = {}
        side = sides.side
        cursor = side._cursor
        schema, bare = table.split(".")
        postgres = side.dialect == "postgres"

        def raw(conn: Any) -> tuple[int, int]:
            with conn.cursor() as cur:
                if postgres:
                    cur.execute(PG_READ, (schema, bare + "%"))
                    rows, scans = cur.fetchone()
                    return int(rows), int(scans)
                cur.execute(MARIADB_READ)
                counters = {str(k).lower(): int(v) for k, v in cur.fetchall()}
            return sum(counters.values()), counters["handler_read_rnd_next"]

        overhead: list[tuple[int, int]] = []

        def read(conn: Any) -> tuple[int, int]:
            if not overhead:
                first, second = raw(conn), raw(conn)
                overhead.append((second[0] - first[0], second[1] - first[1]))
            return raw(conn)

        @contextlib.contextmanager
        def counted_cursor(conn: Any, what: str) -> Iterator[Any]:
            self.statements += 1
            before = read(conn)
            started = time.perf_counter()
            try:
                with cursor(conn, what) as cur:
                    yield cur
            finally:
                took = time.perf_counter() - started
                after = read(conn)
                # (the later read counts the earlier one's own reads: taken off)
                rows = after[0] - before[0] - overhead[0][0]
                self.rows_read += rows
                self.scans += after[1] - before[1] - overhead[0][1]
                self.by_statement[what] = self.by_statement.get(what, 0.0) + took
                self.rows_by_statement[what] = self.rows_by_statement.get(what, 0) + rows

        side._cursor = counted_cursor  # type: ignore[method-assign]
        for call in ("tasks", "partition"):
            setattr(sides, call, self._timed(getattr(sides, call)))

    def _timed(self, call: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        return timed


def run(db: Database, table: str) -> dict[str, float]:
    conn = db.connect()
    try:
        store = store_of(db, table, conn)
        sides = SidePurge.for_run(store, conn, PURGE_LIMIT)
        assert sides is not None
        # A store of its own: the counting must not stay on the shared one.
        sides.side = SideStore(sides.side.dialect, table)
        counted = Counted(sides, table)
        started = time.perf_counter()
        rows = 0
        while True:
            count = store.purge_round(conn, MAX_AGE_DAYS, PURGE_LIMIT, sides=sides)
            conn.commit()
            rows += count
            if count < PURGE_LIMIT:
                break
        wall = time.perf_counter() - started
        probe_started = time.perf_counter()
        db.execute(conn, OLD_PROBE.format(table=table))
        probe = time.perf_counter() - probe_started
        conn.commit()
        return dict(
            wall=wall,
            side=counted.seconds,
            statements=counted.statements,
            cleared=sides.cleared,
            probe=probe,
            rows_read=counted.rows_read,
            scans=counted.scans,
            **{f"stmt:{k}": v for k, v in counted.by_statement.items()},
            **{f"rows:{k}": v for k, v in counted.rows_by_statement.items()},
        )
    finally:
        conn.close()


def check(db: Database, table: str, live: int) -> None:
    admin = db.connect(autocommit=True)
    try:
        for suffix in ("_steps", "_events", "_waiting", "_workflows", "_process_tasks"):
            left = db.execute(admin, f"SELECT count(*) FROM {table}{suffix}")[0][0]
            if left != live:
                raise RuntimeError(f"{table}{suffix}: {left} rows left, {live} expected")
    finally:
        admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--mysql-dsn", default=DEFAULT_MYSQL_DSN)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 200_000])
    parser.add_argument("--purged", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=["postgres", "mariadb"])
    parser.add_argument("--by-statement", action="store_true", help="the 5 slowest statements")
    args = parser.parse_args()
    kinds = [("postgres", args.dsn), ("mariadb", args.mysql_dsn)]
    print(
        f"{args.purged} expired tasks, each with one row in every side table; medians of "
        f"{args.repeat}"
    )
    print(
        f"{'database':10} {'layout':11} {'live':>8} {'run s':>7} {'side s':>7} "
        f"{'side ms/1k':>10} {'stmts':>6} {'rows read':>9} {'scans':>6} {'old probe ms':>12}"
    )
    for kind, dsn in kinds:
        if args.only and kind != args.only:
            continue
        for layout in ("plain", "partitioned"):
            for live in args.sizes:
                results = []
                for _ in range(args.repeat):
                    db = Database(kind, dsn, layout)
                    with db.fresh_queue() as table:
                        try:
                            fill(db, table, live, args.purged)
                            result = run(db, table)
                            check(db, table, live)
                            results.append(result)
                        finally:
                            _drop_sides(db, table)
                med = {k: statistics.median(r[k] for r in results) for k in results[0]}
                print(
                    f"{db.label:10} {layout:11} {live:>8} {med['wall']:>7.3f} "
                    f"{med['side']:>7.3f} {1000 * med['side'] / args.purged * 1000:>10.1f} "
                    f"{int(med['statements']):>6} {int(med['rows_read']):>9} "
                    f"{int(med['scans']):>6} {1000 * med['probe']:>12.1f}",
                    flush=True,
                )
                if args.by_statement:
                    slow = sorted(
                        ((k[5:], v) for k, v in med.items() if k.startswith("stmt:")),
                        key=lambda kv: -kv[1],
                    )
                    print("    " + ", ".join(f"{k} {1000 * v:.0f} ms" for k, v in slow[:5]))
                    most = sorted(
                        ((k[5:], v) for k, v in med.items() if k.startswith("rows:")),
                        key=lambda kv: -kv[1],
                    )
                    print("    rows read: " + ", ".join(f"{k} {int(v)}" for k, v in most[:5]))


def _drop_sides(db: Database, table: str) -> None:
    admin = db.connect(autocommit=True)
    try:
        db.execute(admin, f"DROP TABLE IF EXISTS {', '.join(table + s for s in SIDE_SUFFIXES)}")
    finally:
        admin.close()


if __name__ == "__main__":
    main()
