"""What lock_key costs: the same drain with and without lock keys, paired (issue 19).

    .venv/bin/python benchmarks/bench_flow.py --rounds 3

10,000 no-op tasks committed at once, drained by 8 executors (2 processes x 4),
on PostgreSQL and on MariaDB: once without keys, once spread round-robin over
100 lock keys. Every round measures both back to back, in alternating order,
and the keyed/unkeyed ratio is taken within the round; the row is the median
ratio (the issue asks for keyed >= 0.7 of unkeyed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_mysql  # found through the path entry above

PROCESSES, EXECUTORS = 2, 4
MODES = {"no keys": 0, "100 keys": 100}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument(
        "--pg-dsn",
        default=os.environ.get("BENCH_PG_DSN", "host=127.0.0.1 user=postgres dbname=test"),
    )
    parser.add_argument(
        "--mysql-dsn", default=os.environ.get("BENCH_MYSQL_DSN", "mysql://root:@127.0.0.1/test")
    )
    parser.add_argument(
        "--only",
        choices=("postgres", "mariadb"),
        help="measure one database only (both by default)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        help="QUEUE_BATCH_SIZE for the workers (default: the library's, 20 on PostgreSQL)",
    )
    args = parser.parse_args(argv)
    databases = {
        label: bench_mysql.Database(kind, dsn)
        for label, kind, dsn in (
            ("PostgreSQL", "postgres", args.pg_dsn),
            ("MariaDB", "mariadb", args.mysql_dsn),
        )
        if args.only in (None, kind)
    }
    rates = {db: {mode: [] for mode in MODES} for db in databases}
    ratios: dict[str, list[float]] = {db: [] for db in databases}
    with tempfile.TemporaryDirectory() as logs:
        for round_number in range(args.rounds):
            order = list(MODES) if round_number % 2 == 0 else list(MODES)[::-1]
            for label, db in databases.items():
                got = {}
                for mode in order:
                    got[mode] = bench_mysql.bench_drain(
                        db,
                        PROCESSES,
                        EXECUTORS,
                        {}
                        if args.batch_size is None
                        else {"QUEUE_BATCH_SIZE": str(args.batch_size)},
                        args.count,
                        Path(logs),
                        lock_keys=MODES[mode],
                    ).rate
                    rates[label][mode].append(got[mode])
                ratios[label].append(got["100 keys"] / got["no keys"])
                print(
                    f"round {round_number + 1} {label}: no keys {got['no keys']:,.0f}/s "
                    f"100 keys {got['100 keys']:,.0f}/s ratio {ratios[label][-1]:.3f}",
                    flush=True,
                )
    print()
    print(f"lock_key drain, {args.count:,} tasks, {PROCESSES} processes x {EXECUTORS} executors")
    for label in databases:
        r = ratios[label]
        print(
            f"{label:11} no keys {statistics.median(rates[label]['no keys']):>7,.0f}/s  "
            f"100 keys {statistics.median(rates[label]['100 keys']):>7,.0f}/s  "
            f"keyed/unkeyed median {statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
