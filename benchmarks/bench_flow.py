"""What lock_key costs: the same drain with and without lock keys, paired (issue 19).

    .venv/bin/python benchmarks/bench_flow.py --rounds 3

10,000 no-op tasks committed at once, drained by 8 executors (2 processes x 4),
on PostgreSQL and on MariaDB: once without keys, once spread round-robin over
100 lock keys. Every round measures both back to back, in alternating order,
and the keyed/unkeyed ratio is taken within the round; the row is the median
ratio (the issue asks for keyed >= 0.7 of unkeyed).

    .venv/bin/python benchmarks/bench_flow.py --only postgres --rounds 5 --against ../base

Old code against new, paired: ``--against`` names another checkout of the
library (main, say). Every round then drains with both trees, in alternating
order, each tree's own bench_flow.py run for one round with that tree first on
the path (its own queue DDL and claim routine, its own workers); reported are
each tree's keyed/unkeyed ratio and the rates of this tree over the other's,
per round, as medians with their ranges.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_mysql  # found through the path entry above

PROCESSES, EXECUTORS = 2, 4
MODES = {"no keys": 0, "100 keys": 100}
HERE_TREE = Path(__file__).resolve().parent.parent
# A round's line, as main() prints it below.
_ROUND = re.compile(r"no keys ([\d,]+)/s 100 keys ([\d,]+)/s ratio ([\d.]+)")


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
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout of the library: both trees' drains, alternated round by round",
    )
    args = parser.parse_args(argv)
    if args.against is not None:
        return paired(args)
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


def paired(args: argparse.Namespace) -> int:
    """This tree against ``args.against``, one round of each per round (one database)."""
    if args.only is None:
        raise SystemExit("--against measures one database: give --only too")
    trees = {"this": HERE_TREE, "other": args.against.resolve()}
    rounds: dict[str, list[tuple[float, float, float]]] = {name: [] for name in trees}
    for round_number in range(args.rounds):
        order = list(trees) if round_number % 2 == 0 else list(trees)[::-1]
        for name in order:
            got = _one_round(trees[name], args)
            rounds[name].append(got)
            print(
                f"round {round_number + 1} {name} ({trees[name]}): no keys {got[0]:,.0f}/s "
                f"100 keys {got[1]:,.0f}/s ratio {got[2]:.3f}",
                flush=True,
            )
    print()
    print(f"lock_key drain, {args.count:,} tasks, {PROCESSES} processes x {EXECUTORS} executors")
    for name, tree in trees.items():
        print(
            f"{name:5} {tree}: keyed/unkeyed median {_median_range([r[2] for r in rounds[name]])}"
        )
    pairs = list(zip(rounds["this"], rounds["other"], strict=True))
    for index, label in ((0, "no keys"), (1, "100 keys")):
        ratios = [mine[index] / theirs[index] for mine, theirs in pairs]
        print(f"{label:8} this/other per round: median {_median_range(ratios)}")
    return 0


def _one_round(tree: Path, args: argparse.Namespace) -> tuple[float, float, float]:
    """(no keys /s, 100 keys /s, ratio) of one round of ``tree``'s own bench_flow.py."""
    command = [sys.executable, str(tree / "benchmarks" / "bench_flow.py"), "--rounds", "1"]
    command += ["--only", args.only, "--count", str(args.count)]
    command += ["--pg-dsn", args.pg_dsn, "--mysql-dsn", args.mysql_dsn]
    if args.batch_size is not None:
        command += ["--batch-size", str(args.batch_size)]
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, check=False)
    found = _ROUND.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{tree}: bench_flow failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    no_keys, keyed = (float(found[i].replace(",", "")) for i in (1, 2))
    return no_keys, keyed, float(found[3])


def _median_range(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


if __name__ == "__main__":
    sys.exit(main())
