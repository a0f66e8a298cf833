"""Retention of one expired day of history on MariaDB: the plain layout's purge against the
partitioned layout's drop of the day, paired in one run (bench_retention.py's PostgreSQL
rows, on MariaDB).

Each round fills one day of ``--rows`` finished attempts, older than QUEUE_PURGE_MAX_AGE,
on a queue of each layout (generated in SQL from MariaDB's sequence engine), then times
what the purge service does about them (``store.purge_round``, as the service calls it):
bounded DELETE rounds of QUEUE_PURGE_LIMIT rows on the plain table; on the partitioned
one, the days ahead checked and the day's partition dropped.

    .venv/bin/python benchmarks/bench_retention_mysql.py --rows 1000000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_mysql import DEFAULT_MYSQL_DSN, Database  # noqa: E402

from nsj_queue_lib.db.mysql.driver import configure_session  # noqa: E402
from nsj_queue_lib.db.mysql.store import MysqlQueueStore  # noqa: E402

MAX_AGE_DAYS = 30
PURGE_LIMIT = 1000
EXPIRED = 40  # days ago: past MAX_AGE_DAYS
FILL = """
INSERT INTO {table} (processo, payload, status, mensagem, data_hora, data_hora_inicial,
                     started_at, finished_at{day_column})
SELECT CONCAT('p', seq % 5), REPEAT('x', 100), 'sucesso', 'ok', r.at, r.at, r.at, r.at{day_value}
FROM (SELECT seq, NOW(6) - INTERVAL {expired} DAY AS at FROM seq_1_to_{rows}) AS r
"""


def old_day(db: Database, admin, table: str, days_ago: int) -> int:
    """The partition of the day ``days_ago`` days before today, made; its day number."""
    today = db.execute(admin, "SELECT UNIX_TIMESTAMP() DIV 86400")[0][0]
    day = int(today - days_ago)
    # Days are added at the end only: the oldest day partition is split in two.
    db.execute(
        admin,
        f"ALTER TABLE {table} REORGANIZE PARTITION p{today - 1} INTO ("
        f"PARTITION p{day} VALUES LESS THAN ({day + 1}), "
        f"PARTITION p{today - 1} VALUES LESS THAN ({today}))",
    )
    return day


def fill(db: Database, table: str, rows: int, partitioned: bool) -> None:
    admin = db.connect(autocommit=True)
    try:
        day_column = day_value = ""
        if partitioned:
            day = old_day(db, admin, table, EXPIRED)
            day_column, day_value = ", finished_day", f", {day}"
        sql = FILL.format(
            table=table, day_column=day_column, day_value=day_value, expired=EXPIRED, rows=rows
        )
        db.execute(admin, sql)
        db.execute(admin, f"ANALYZE TABLE {table}")
    finally:
        admin.close()


def purge(db: Database, table: str) -> tuple[float, int]:
    """Seconds the purge service's work took, and the rows it removed (estimated when
    dropped)."""
    conn = db.connect(autocommit=True)
    try:
        configure_session(conn, executor=False)
        store = MysqlQueueStore(table)
        store.bind(conn)
        removed, started = 0, time.perf_counter()
        while True:
            conn.begin()
            count = store.purge_round(conn, MAX_AGE_DAYS, PURGE_LIMIT)
            conn.commit()
            removed += count
            if count < PURGE_LIMIT:
                break
        return time.perf_counter() - started, removed
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_MYSQL_DSN)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {"plain": [], "partitioned": []}
    for round_ in range(args.rounds):
        order = ("plain", "partitioned") if round_ % 2 == 0 else ("partitioned", "plain")
        for layout in order:
            db = Database("mariadb", args.dsn, layout)
            with db.fresh_queue() as table:
                fill(db, table, args.rows, layout == "partitioned")
                took, removed = purge(db, table)
                admin = db.connect(autocommit=True)
                try:
                    left = db.execute(admin, f"SELECT count(*) FROM {table}")[0][0]
                finally:
                    admin.close()
                if left:
                    raise RuntimeError(f"{layout}: {left} expired rows left after the purge")
                seconds[layout].append(took)
                print(
                    f"round {round_ + 1} {layout}: {took:.3f} s ({removed} rows counted)",
                    flush=True,
                )
    plain, part = statistics.median(seconds["plain"]), statistics.median(seconds["partitioned"])
    print(
        f"\none expired day of {args.rows:,} rows, medians of {args.rounds} rounds: "
        f"plain purge {plain:.3f} s, partitioned drop {part:.3f} s ({plain / part:.0f}x)"
    )


if __name__ == "__main__":
    main()
