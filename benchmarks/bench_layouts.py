"""The plain and the partitioned layout of a PostgreSQL queue, same code, paired rounds.

Each round drains ``--count`` tasks enqueued before the workers start, once on a queue of
each layout (in alternating order), with the workers of ``bench_worker.py``; it prints
tasks per second, the ratio partitioned/plain, and checks that every task ended
'sucesso' and that the workers logged no error (a serialization failure of a claim that
met a row moved to its day's partition is retried inside the claim, never reported).

    .venv/bin/python benchmarks/bench_layouts.py --rounds 5 --count 20000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import (  # noqa: E402
    DEFAULT_DSN,
    connect,
    fresh_queue,
    running_workers,
    wait_succeeded,
)

CONFIGS = {
    "1 process x 1, single commits": (1, 1, {}),
    "2 processes x 4, group commit": (2, 4, {"QUEUE_BATCH_SIZE": "10"}),
}


def drain(dsn: str, layout: str, count: int, config: tuple, log_dir: Path) -> float:
    processes, concurrency, env = config
    with fresh_queue(dsn, layout) as queue, connect(dsn, autocommit=True) as admin:
        first, last = admin.execute(
            f"WITH ins AS (INSERT INTO public.{queue} (processo, payload) "
            "SELECT 'bench', '{}' FROM generate_series(1, %s) RETURNING id) "
            "SELECT min(id), max(id) FROM ins",
            (count,),
        ).fetchone()
        admin.execute(f"ANALYZE public.{queue}")
        with running_workers(dsn, queue, processes, concurrency, log_dir, env) as workers:
            t0 = time.perf_counter()
            seconds = wait_succeeded(admin, queue, first, last, count, t0, 600)
        errors = [
            line
            for log in workers.logs
            for line in log.read_text(errors="replace").splitlines()
            if " ERROR " in line or "Traceback" in line
        ]
        if errors:
            raise RuntimeError(f"{layout}: the workers logged errors: {errors[:3]}")
        return count / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=20000)
    args = parser.parse_args()
    rates: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as logs:
        for round_ in range(args.rounds):
            for label, config in CONFIGS.items():
                order = ("plain", "partitioned") if round_ % 2 == 0 else ("partitioned", "plain")
                got = {
                    layout: drain(args.dsn, layout, args.count, config, Path(logs))
                    for layout in order
                }
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
            f"{label:32s} plain {statistics.median(plain):8,.0f}/s  "
            f"partitioned {statistics.median(part):8,.0f}/s  "
            f"ratio {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
        )


if __name__ == "__main__":
    main()
