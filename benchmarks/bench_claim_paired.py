"""The same no-op drain with two versions of the library, in paired rounds: what a claim change costs.

    git archive <before> | tar -x -C /tmp/before
    git archive <after>  | tar -x -C /tmp/after
    .venv/bin/python benchmarks/bench_claim_paired.py /tmp/before /tmp/after --rounds 5

Each tree drains ``--count`` no-op tasks (``bench_mysql.bench_drain``: its own
queue from its own ``db_gen``, its own worker processes, ``bench_worker``-style
no-op handler) on PostgreSQL and MariaDB, both trees back to back in every
round, in alternating order; the after/before ratio is taken within the round
(this VM's speed drifts within minutes) and the medians are printed. The trees
share this interpreter's installed dependencies.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

_DRAIN = """
import sys
from pathlib import Path
sys.path.insert(0, str(Path({tree!r}) / "benchmarks"))
import bench_mysql
db = bench_mysql.Database({kind!r}, {dsn!r})
d = bench_mysql.bench_drain(db, {processes}, {executors}, {env!r}, {count}, Path({logs!r}))
print(d.rate, d.worker_ms_per_1k, d.db_ms_per_1k)
"""


def drain(
    tree: str,
    kind: str,
    dsn: str,
    processes: int,
    executors: int,
    count: int,
    env: dict[str, str] | None = None,
) -> tuple[float, float, float]:
    """Tasks per second of one drain with the library of ``tree``, and the CPU per 1,000
    tasks (ms) of the workers and of the database server."""
    with tempfile.TemporaryDirectory() as logs:
        code = _DRAIN.format(
            tree=tree,
            kind=kind,
            dsn=dsn,
            processes=processes,
            executors=executors,
            count=count,
            logs=logs,
            env=env or {},
        )
        env = dict(os.environ, PYTHONPATH=tree)
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True
        )
        if out.returncode != 0:
            raise RuntimeError(f"drain with {tree} failed: {out.stderr[-2000:]}")
        rate, worker, server = out.stdout.strip().splitlines()[-1].split()
        return float(rate), float(worker), float(server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--executors", type=int, default=1)
    parser.add_argument(
        "--pg-dsn",
        default=os.environ.get("BENCH_PG_DSN", "host=127.0.0.1 user=postgres dbname=test"),
    )
    parser.add_argument(
        "--mysql-dsn",
        default=os.environ.get("BENCH_MYSQL_DSN", "mysql://root:@127.0.0.1:3306/test"),
    )
    parser.add_argument("--only", choices=("postgres", "mariadb"))
    parser.add_argument(
        "--env", action="append", default=[], help="KEY=VALUE for the workers (repeatable)"
    )
    parser.add_argument(
        "--env-after",
        action="append",
        default=[],
        help="KEY=VALUE for the after side's workers only (repeatable): one tree, two settings",
    )
    args = parser.parse_args(argv)
    databases = {"postgres": args.pg_dsn, "mariadb": args.mysql_dsn}
    if args.only:
        databases = {args.only: databases[args.only]}
    env = dict(item.split("=", 1) for item in args.env)
    envs = {"before": env, "after": dict(env, **dict(i.split("=", 1) for i in args.env_after))}
    sides = {"before": args.before, "after": args.after}
    rates: dict[str, dict[str, list[float]]] = {k: {s: [] for s in sides} for k in databases}
    cpu: dict[str, dict[str, list[tuple[float, float]]]] = {
        k: {s: [] for s in sides} for k in databases
    }
    ratios: dict[str, list[float]] = {kind: [] for kind in databases}
    for number in range(args.rounds):
        order = list(sides) if number % 2 == 0 else list(sides)[::-1]
        for kind, dsn in databases.items():
            got = {}
            for side in order:
                got[side], *used = drain(
                    sides[side], kind, dsn, args.processes, args.executors, args.count, envs[side]
                )
                rates[kind][side].append(got[side])
                cpu[kind][side].append((used[0], used[1]))
            ratios[kind].append(got["after"] / got["before"])
            print(
                f"round {number + 1} {kind}: before {got['before']:,.0f}/s "
                f"after {got['after']:,.0f}/s ratio {ratios[kind][-1]:.3f}",
                flush=True,
            )
    print()
    for kind in databases:
        r = ratios[kind]
        print(
            f"{kind:9} {args.processes}x{args.executors}: before median "
            f"{statistics.median(rates[kind]['before']):,.0f}/s, after median "
            f"{statistics.median(rates[kind]['after']):,.0f}/s, after/before per round median "
            f"{statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f})"
        )
        for side in sides:
            used = cpu[kind][side]
            print(
                f"  {side}: CPU per 1,000 tasks, medians: workers "
                f"{statistics.median(u[0] for u in used):,.0f} ms, database server "
                f"{statistics.median(u[1] for u in used):,.0f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
