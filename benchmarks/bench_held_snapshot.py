"""Claims while another session holds a snapshot (PostgreSQL): does the claim decay?

A REPEATABLE READ transaction elsewhere (a report, a replica's feedback, a forgotten
session) holds the xmin horizon: no row version dead since its snapshot can be removed,
and every claimed task leaves its entry in the claim index. A claim that walks the index
from its start then walks every task claimed since the snapshot.

The probe: a backlog of ``--tasks`` ready tasks, then one executor connection claims and
completes them one by one through the store (the claim function, as a worker's executor
does), timed per ``--chunk`` tasks; once with no snapshot held, once with one held for
the whole drain. Paired in one run; ``--checkouts`` runs the same probe with other
checkouts' code (old vs new) in alternating rounds.

    .venv/bin/python benchmarks/bench_held_snapshot.py --tasks 20000 --rounds 3
    .venv/bin/python benchmarks/bench_held_snapshot.py --checkouts /tmp/old .
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def probe(dsn: str, tasks: int, chunk: int, hold: bool) -> list[float]:
    """Milliseconds per chunk of claimed-and-completed tasks."""
    sys.path.insert(0, str(HERE))
    from _harness import connect, fresh_queue

    from nsj_queue_lib.db.postgres.store import PostgresQueueStore

    with fresh_queue(dsn) as name:
        table = f"public.{name}"
        with connect(dsn, autocommit=True) as admin:
            admin.execute(
                f"INSERT INTO {table} (processo, payload, data_hora, data_hora_inicial) "
                "SELECT 'p', '{}', now() - interval '1 minute', now() - interval '1 minute' "
                "FROM generate_series(1, %s)",
                (tasks,),
            )
            admin.execute(f"VACUUM ANALYZE {table}")
        holder = connect(dsn)
        worker = connect(dsn, autocommit=True)
        try:
            if hold:
                holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                holder.execute(f"SELECT count(*) FROM {table}").fetchone()  # the snapshot
            store = PostgresQueueStore(table)
            store.bind(worker)
            times = []
            claim = store.claim(worker)
            for _ in range(tasks // chunk):
                started = time.perf_counter()
                for _ in range(chunk):
                    if claim is None:
                        raise RuntimeError("the backlog ran out before the chunks did")
                    claim = store.complete_and_claim(worker, claim.task.id, "ok", True)
                times.append((time.perf_counter() - started) * 1000)
            if claim is not None:
                store.rollback(worker)
            return times
        finally:
            holder.rollback()
            holder.close()
            worker.close()


def run_in(checkout: str, args: argparse.Namespace, hold: bool) -> list[float]:
    """The probe with ``checkout``'s library, in a process of its own."""
    env = dict(os.environ, PYTHONPATH=str(Path(checkout).resolve()))
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--dsn",
        args.dsn,
        "--tasks",
        str(args.tasks),
        "--chunk",
        str(args.chunk),
        "--one",
        "hold" if hold else "free",
    ]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default="host=127.0.0.1 user=postgres dbname=test")
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--chunk", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkouts", nargs="+", default=["."])
    parser.add_argument("--one", choices=["hold", "free"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child: one probe, its chunk times as JSON on the last line
        print(json.dumps(probe(args.dsn, args.tasks, args.chunk, args.one == "hold")))
        return
    results: dict[tuple[str, bool], list[list[float]]] = {}
    for _ in range(args.rounds):
        for checkout in args.checkouts:
            for hold in (False, True):
                results.setdefault((checkout, hold), []).append(run_in(checkout, args, hold))
    print(f"{args.tasks} tasks claimed and completed one by one, ms per {args.chunk}; ")
    print("median of rounds per chunk (first chunk ... last chunk)")
    for (checkout, hold), rounds in results.items():
        chunks = [statistics.median(r[i] for r in rounds) for i in range(len(rounds[0]))]
        label = f"{checkout} {'snapshot held' if hold else 'no snapshot'}"
        print(
            f"{label:40s} first {chunks[0]:7.0f}  last {chunks[-1]:7.0f}  "
            f"last/first {chunks[-1] / chunks[0]:5.2f}  all {' '.join(f'{c:.0f}' for c in chunks)}"
        )


if __name__ == "__main__":
    main()
