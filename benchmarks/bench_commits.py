"""Two commits of the library side by side: the same drains, in paired rounds, one run.

    .venv/bin/python benchmarks/bench_commits.py --old /path/to/old/tree --new . --rounds 5

Each tree is a checkout of this repository (``git worktree add /tmp/old <commit>``).
A measurement runs that tree's own ``benchmarks/bench_mysql.py`` (its
``bench_drain``, its worker, its ``db_gen``) in a subprocess with the tree on
``PYTHONPATH``, so each side is exactly its commit. Workloads: the 5,000-task
drain at default settings (1 process x 1 executor) and at the best
configuration of the MariaDB work (PostgreSQL 4 processes x 2, MariaDB 2 x 4
polling every 0.1 s), on both databases. Every round measures old and new
back to back, in alternating order, and the new/old ratio is taken within
the round: this VM's speed drifts by tens of percent within minutes, which
medians taken minutes apart do not survive.

``--old-env``/``--new-env KEY=VALUE`` add a worker variable on one side only, so
one tree can be compared with itself (the cost of a setting):

    bench_commits.py --old . --new . --old-env QUEUE_OTEL=false \
        --new-env QUEUE_OTEL=true --new-env BENCH_OTEL_SDK=memory
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

CONFIGS = {
    # label: (database kind, processes, executors per process, extra environment)
    "PostgreSQL default (1x1)": ("postgres", 1, 1, {}),
    "PostgreSQL best (4x2)": ("postgres", 4, 2, {}),
    "MariaDB default (1x1)": ("mariadb", 1, 1, {}),
    "MariaDB best (2x4, poll 0.1 s)": ("mariadb", 2, 4, {"QUEUE_POLL_INTERVAL": "0.1"}),
}

# Runs inside the tree's own interpreter path: prints one JSON line.
_MEASURE = textwrap.dedent(
    """
    import json, sys, tempfile
    from pathlib import Path
    tree, kind, dsn, processes, concurrency, extra, count = sys.argv[1:8]
    sys.path.insert(0, str(Path(tree) / "benchmarks"))
    import nsj_queue_lib, bench_mysql
    assert Path(nsj_queue_lib.__file__).resolve().is_relative_to(Path(tree).resolve()), (
        nsj_queue_lib.__file__
    )
    db = bench_mysql.Database(kind, dsn)
    with tempfile.TemporaryDirectory() as logs:
        drain = bench_mysql.bench_drain(
            db, int(processes), int(concurrency), json.loads(extra), int(count), Path(logs)
        )
    print(json.dumps({"rate": drain.rate, "worker_ms": drain.worker_ms_per_1k,
                      "db_ms": drain.db_ms_per_1k}))
    """
)


def measure(
    tree: Path, kind: str, dsn: str, processes: int, executors: int, extra: dict, count: int
) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _MEASURE,
            str(tree),
            kind,
            dsn,
            str(processes),
            str(executors),
            json.dumps(extra),
            str(count),
        ],
        env=env,
        cwd=str(tree),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{tree} {kind}: {out.stderr[-2000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the earlier commit's tree")
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--only", action="append", help="a label of CONFIGS (repeatable)")
    for side in ("old", "new"):
        parser.add_argument(
            f"--{side}-env",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"a worker environment variable of the {side} side only (repeatable)",
        )
    parser.add_argument(
        "--pg-dsn",
        default=os.environ.get("BENCH_PG_DSN", "host=127.0.0.1 user=postgres dbname=test"),
    )
    parser.add_argument(
        "--mysql-dsn",
        default=os.environ.get("BENCH_MYSQL_DSN", "mysql://root:@127.0.0.1:3306/test"),
    )
    args = parser.parse_args(argv)
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    side_env = {
        "old": dict(item.split("=", 1) for item in args.old_env),
        "new": dict(item.split("=", 1) for item in args.new_env),
    }
    labels = args.only or list(CONFIGS)
    rates: dict[str, dict[str, list[float]]] = {label: {"old": [], "new": []} for label in labels}
    ratios: dict[str, list[float]] = {label: [] for label in labels}
    for round_number in range(args.rounds):
        order = ("old", "new") if round_number % 2 == 0 else ("new", "old")
        for label in labels:
            kind, processes, executors, extra = CONFIGS[label]
            dsn = args.pg_dsn if kind == "postgres" else args.mysql_dsn
            got = {}
            for side in order:
                env = {**extra, **side_env[side]}
                got[side] = measure(trees[side], kind, dsn, processes, executors, env, args.count)
                rates[label][side].append(got[side]["rate"])
            ratios[label].append(got["new"]["rate"] / got["old"]["rate"])
            print(
                f"round {round_number + 1} {label}: old {got['old']['rate']:,.0f}/s "
                f"new {got['new']['rate']:,.0f}/s ratio {ratios[label][-1]:.3f} "
                f"(worker CPU ms/1k old {got['old']['worker_ms']:.0f} "
                f"new {got['new']['worker_ms']:.0f})",
                flush=True,
            )
    print()
    print(f"{'workload':34} {'old median':>11} {'new median':>11} {'new/old per round':>28}")
    for label in labels:
        r = ratios[label]
        print(
            f"{label:34} {statistics.median(rates[label]['old']):>9,.0f}/s "
            f"{statistics.median(rates[label]['new']):>9,.0f}/s "
            f"   median {statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
