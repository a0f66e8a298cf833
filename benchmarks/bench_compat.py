"""What QUEUE_COMPAT_1_2_2=ON costs on PostgreSQL: the same drains, compat on and off, paired.

    .venv/bin/python benchmarks/bench_compat.py --rounds 5

Workloads: the 5,000 no-op task drain of ``bench_mysql.bench_drain`` at default
settings (1 process x 1 executor) and at the best PostgreSQL configuration
(4 x 2). Every round measures both modes back to back, in alternating order,
and the on/off ratio is taken within the round (this VM's speed drifts within
minutes). Compatibility mode holds nsj-queue-lib 1.2.2's key of every task
next to ours, and releases it only after the task committed, so completion
and the next claim no longer share one round trip (docs/upgrading.md).
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

CONFIGS = {"PostgreSQL default (1x1)": (1, 1), "PostgreSQL best (4x2)": (4, 2)}
MODES = ("OFF", "ON")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument(
        "--pg-dsn",
        default=os.environ.get("BENCH_PG_DSN", "host=127.0.0.1 user=postgres dbname=test"),
    )
    args = parser.parse_args(argv)
    db = bench_mysql.Database("postgres", args.pg_dsn)
    rates = {label: {mode: [] for mode in MODES} for label in CONFIGS}
    worker_ms = {label: {mode: [] for mode in MODES} for label in CONFIGS}
    ratios: dict[str, list[float]] = {label: [] for label in CONFIGS}
    with tempfile.TemporaryDirectory() as logs:
        for round_number in range(args.rounds):
            order = MODES if round_number % 2 == 0 else MODES[::-1]
            for label, (processes, executors) in CONFIGS.items():
                got = {}
                for mode in order:
                    extra = {"QUEUE_COMPAT_1_2_2": mode}
                    got[mode] = bench_mysql.bench_drain(
                        db, processes, executors, extra, args.count, Path(logs)
                    )
                    rates[label][mode].append(got[mode].rate)
                    worker_ms[label][mode].append(got[mode].worker_ms_per_1k)
                ratios[label].append(got["ON"].rate / got["OFF"].rate)
                print(
                    f"round {round_number + 1} {label}: off {got['OFF'].rate:,.0f}/s "
                    f"on {got['ON'].rate:,.0f}/s ratio {ratios[label][-1]:.3f} "
                    f"(worker CPU ms/1k off {got['OFF'].worker_ms_per_1k:.0f} "
                    f"on {got['ON'].worker_ms_per_1k:.0f})",
                    flush=True,
                )
    print()
    print(f"{'workload':26} {'off median':>11} {'on median':>11} {'on/off per round':>28}")
    for label in CONFIGS:
        r = ratios[label]
        print(
            f"{label:26} {statistics.median(rates[label]['OFF']):>9,.0f}/s "
            f"{statistics.median(rates[label]['ON']):>9,.0f}/s "
            f"   median {statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f}); "
            f"worker CPU ms/1k {statistics.median(worker_ms[label]['OFF']):.0f} -> "
            f"{statistics.median(worker_ms[label]['ON']):.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
