"""The plain and the partitioned layout of a MariaDB queue, same code, paired rounds.

Each round drains ``--count`` no-op tasks committed at once for worker processes already
running (``bench_mysql.bench_drain``: its worker, its clock, its CPU counts), once on a
queue of each layout, in alternating order; it prints tasks per second and the ratio
partitioned/plain, then the medians. The partitioned layout moves each settled row to its
day's partition (docs/internals/storage.md: about twice today's settle on MariaDB), and
no purge follows it.

    .venv/bin/python benchmarks/bench_layouts_mysql.py --rounds 3 --count 5000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_mysql import DEFAULT_MYSQL_DSN, Database, bench_drain, mariadb_poll  # noqa: E402

# (processes, QUEUE_CONCURRENCY, settings): one executor; the 2-core machine's best grid
# point (bench_mysql.py), with group commit.
CONFIGS = {
    "1 process x 1": (1, 1, {}),
    "2 processes x 4, batch 10": (2, 4, {"QUEUE_BATCH_SIZE": "10"}),
}
LAYOUTS = ("plain", "partitioned")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_MYSQL_DSN)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=5000)
    args = parser.parse_args()
    dbs = {layout: Database("mariadb", args.dsn, layout) for layout in LAYOUTS}
    print(dbs["plain"].describe())
    rates: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as logs:
        for round_ in range(args.rounds):
            for label, (processes, concurrency, env) in CONFIGS.items():
                order = LAYOUTS if round_ % 2 == 0 else LAYOUTS[::-1]
                got = {}
                for layout in order:
                    drained = bench_drain(
                        dbs[layout],
                        processes,
                        concurrency,
                        {**mariadb_poll(0.1), **env},
                        args.count,
                        Path(logs),
                    )
                    got[layout] = drained.rate
                for layout, rate in got.items():
                    rates.setdefault((label, layout), []).append(rate)
                print(
                    f"round {round_ + 1} {label}: plain {got['plain']:,.0f}/s "
                    f"partitioned {got['partitioned']:,.0f}/s "
                    f"ratio {got['partitioned'] / got['plain']:.3f}",
                    flush=True,
                )
    print(f"\nmedians of {args.rounds} paired rounds, {args.count} tasks each")
    for label in CONFIGS:
        plain, part = rates[(label, "plain")], rates[(label, "partitioned")]
        ratios = [p / q for p, q in zip(part, plain, strict=True)]
        print(
            f"{label:28s} plain {statistics.median(plain):8,.0f}/s  "
            f"partitioned {statistics.median(part):8,.0f}/s  "
            f"ratio {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
        )


if __name__ == "__main__":
    main()
