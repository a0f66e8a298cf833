"""Retention of one expired day of history (PostgreSQL): the plain layout's purge against the
partitioned layout's drop of the day, paired in one run.

Each round fills one day of ``--rows`` finished attempts, older than QUEUE_PURGE_MAX_AGE,
on a queue of each layout (generated in SQL: ``INSERT ... SELECT generate_series``),
then times what the purge service does about them: DELETE rounds of
QUEUE_PURGE_LIMIT rows on the plain table, the detach and drop of the day's partition
on the partitioned one (``store.purge_round``, as the service calls it).

    .venv/bin/python benchmarks/bench_retention.py --rows 1000000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import DEFAULT_DSN, connect, fresh_queue  # noqa: E402

from nsj_queue_lib.db.postgres.store import PostgresQueueStore  # noqa: E402

MAX_AGE_DAYS = 30
PURGE_LIMIT = 1000
EXPIRED = 40  # days ago: past MAX_AGE_DAYS
FILL = """
INSERT INTO {target} (processo, payload, status, mensagem, data_hora, data_hora_inicial,
                      started_at, finished_at{day_column})
SELECT 'p' || (n %% 5), repeat('x', 100), 'sucesso', 'ok', at, at, at, at{day_value}
FROM (SELECT n, clock_timestamp() - interval '{expired} days' AS at
      FROM generate_series(1, %(rows)s) AS n) AS r
"""


def fill(admin, table: str, rows: int, partitioned: bool) -> None:
    if partitioned:
        day = admin.execute(
            f"SELECT (clock_timestamp() AT TIME ZONE 'UTC')::date - DATE '1970-01-01' - {EXPIRED}"
        ).fetchone()[0]
        target = f"{table}_p{day}"
        admin.execute(
            f"CREATE TABLE {target} PARTITION OF {table} FOR VALUES FROM ({day}) TO ({day + 1})"
        )
        sql = FILL.format(
            target=target, day_column=", finished_day", day_value=f", {day}", expired=EXPIRED
        )
    else:
        sql = FILL.format(target=table, day_column="", day_value="", expired=EXPIRED)
    admin.execute(sql, {"rows": rows})
    admin.execute(f"VACUUM ANALYZE {table}")


def purge(dsn: str, table: str) -> tuple[float, int]:
    """Seconds the purge service's work took, and the rows it removed."""
    conn = connect(dsn)
    try:
        store = PostgresQueueStore(table)
        store.bind(conn)
        conn.commit()
        removed, started = 0, time.perf_counter()
        while True:
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
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {"plain": [], "partitioned": []}
    for round_ in range(args.rounds):
        order = ("plain", "partitioned") if round_ % 2 == 0 else ("partitioned", "plain")
        for layout in order:
            with fresh_queue(args.dsn, layout) as name, connect(args.dsn, autocommit=True) as admin:
                table = f"public.{name}"
                fill(admin, table, args.rows, layout == "partitioned")
                took, removed = purge(args.dsn, table)
                left = admin.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
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
