"""What-if measurements behind the bottlenecks reported next to the benchmark table.

    .venv/bin/python benchmarks/variants.py [--runs 3] [--drain-config 2x2]

Not a benchmark of the library as shipped: each variant changes one thing
(the caller's transaction mode, the notify trigger, the secondary indexes,
commit durability) to show what that thing costs. Same harness, same quiet-
machine rules and same ``BENCH_PG_DSN`` as run_all.py.

Dropped "secondary" indexes: the purge indexes (``data_hora``, ``chain``) and
``list_equivalent_task``'s index (``equivalent``). The claim, due and running
indexes stay: the worker's own queries need them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import DEFAULT_DSN, Monitor, connect
from run_all import Bench, Config, Results, bench_drain, bench_enqueue_single, text_table

SECONDARY_INDEXES = ("data_hora", "chain", "equivalent")


def no_trigger(conn, queue):
    conn.execute(f"ALTER TABLE public.{queue} DISABLE TRIGGER USER")


def no_secondary_indexes(conn, queue):
    for name in SECONDARY_INDEXES:
        conn.execute(f"DROP INDEX public.idx_{queue}_{name}")


def no_trigger_no_secondary_indexes(conn, queue):
    no_trigger(conn, queue)
    no_secondary_indexes(conn, queue)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--drain-config", default="2x2", help="second drain configuration, PxC (default 2x2)"
    )
    args = parser.parse_args()
    p, c = (int(x) for x in args.drain_config.split("x"))

    dsn = os.environ.get("BENCH_PG_DSN") or DEFAULT_DSN
    log_dir = Path(tempfile.mkdtemp(prefix="nsj_variants_"))
    cfg = Config(dsn=dsn, runs=args.runs, log_dir=log_dir)
    n = cfg.drain_tasks
    sync_off = {"PGOPTIONS": "-c synchronous_commit=off"}
    variants = [
        ("enqueue 1/tx", "as benchmarked (BEGIN, INSERT, COMMIT)", bench_enqueue_single, ()),
        (
            "enqueue 1/tx",
            "autocommit (INSERT only: no BEGIN/COMMIT round trips)",
            bench_enqueue_single,
            (True,),
        ),
        ("enqueue 1/tx", "notify trigger disabled", bench_enqueue_single, (False, no_trigger)),
        (
            "enqueue 1/tx",
            "3 secondary indexes dropped",
            bench_enqueue_single,
            (False, no_secondary_indexes),
        ),
        (
            "enqueue 1/tx",
            "trigger disabled + 3 indexes dropped",
            bench_enqueue_single,
            (False, no_trigger_no_secondary_indexes),
        ),
    ]
    for procs, conc in ((1, 1), (p, c)):
        label = f"drain {procs}x{conc}"
        variants += [
            (label, "as benchmarked", bench_drain, (procs, conc, n, n)),
            (
                label,
                "workers with synchronous_commit=off",
                bench_drain,
                (procs, conc, n, n, sync_off),
            ),
            (
                label,
                "3 secondary indexes dropped",
                bench_drain,
                (procs, conc, n, n, None, no_secondary_indexes),
            ),
        ]

    results = Results()
    values: dict[int, list] = {i: [] for i in range(len(variants))}
    started = time.perf_counter()
    with connect(dsn, autocommit=True) as activity:
        bench = Bench(cfg, results, Monitor(activity))
        for run in range(1, args.runs + 1):
            print(f"== run {run}/{args.runs}", flush=True)
            for i, (group, name, fn, fargs) in enumerate(variants):
                v = bench.measure(f"{group}: {name}", fn, *fargs)
                if v is not None:
                    values[i].append(v)
                    rate = v if isinstance(v, float) else v.rate
                    extra = (
                        ""
                        if isinstance(v, float)
                        else (
                            f" (worker CPU {v.worker_cpu_ms_per_1k:.0f} ms/1k, PG CPU {v.pg_cpu_ms_per_1k:.0f} ms/1k)"
                        )
                    )
                    print(f"  {group}: {name}: {rate:,.0f} tasks/s{extra}", flush=True)

    rows = []
    for i, (group, name, _, _) in enumerate(variants):
        vs = values[i]
        rates = [v if isinstance(v, float) else v.rate for v in vs]
        drains = [v for v in vs if not isinstance(v, float)]

        def med(attr: str, drains: list = drains) -> str:
            return f"{statistics.median(getattr(d, attr) for d in drains):,.0f}" if drains else ""

        rows.append(
            [
                group,
                name,
                f"{statistics.median(rates):,.0f}" if rates else "n/a",
                str(len(rates)),
                med("worker_cpu_ms_per_1k"),
                med("pg_cpu_ms_per_1k"),
            ]
        )
    print()
    print(f"Variants ({args.runs} run(s), medians; {(time.perf_counter() - started) / 60:.1f} min)")
    print(
        text_table(
            ["workload", "variant", "tasks/s", "runs", "worker CPU ms/1k", "PG CPU ms/1k"],
            rows,
            {0, 1},
        )
    )
    if results.disturbed:
        print("\nDisturbed (least disturbed attempt kept): " + "; ".join(results.disturbed))
    for f in log_dir.iterdir():
        f.unlink()
    log_dir.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
