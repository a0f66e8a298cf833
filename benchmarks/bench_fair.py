"""What fair shares cost (issue 43 item 2): a backlog enqueued with ``fair_key`` on 100 keys
against the same backlog without keys, drained in paired rounds.

    .venv/bin/python benchmarks/bench_fair.py --rounds 3 --tasks 2000

Each round fills two queues of one database made by this tree's ``db_gen``: ``plain``
with ``--tasks`` tasks without a fair key, ``fair`` with the same number on 100 keys,
each key's tasks enqueued together, one key after another (the order fair shares
reshuffle). Both through ``QueueClient.insert_tasks`` in one transaction. Then both
are drained by their claim routines alone, call by call in turn on two connections
(bench_pause_claim.py's harness: a claim-and-complete call per task), so that both
sides meet the same moments of this VM's drifting speed. Printed per round: the drain
rates and their ratio fair/plain (the issue's target: at least 0.85), and the enqueue
times (a keyed task's turn costs the enqueue index look-ups: PostgreSQL one statement
per task, MariaDB one look-up per key and call). The medians of the rounds close.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_mysql
from bench_pause_claim import create, interleaved

from nsj_queue_lib import QueueClient
from nsj_queue_lib.db_gen import render

KEYS = 100


def enqueue(db: bench_mysql.Database, table: str, tasks: int, keyed: bool) -> float:
    """Seconds to enqueue ``tasks`` tasks (with 100 fair keys, key by key, when ``keyed``)."""
    per_key = max(1, tasks // KEYS)
    items = [
        dict(
            origem="bench",
            destino="bench",
            processo="bench",
            chave_externa=str(n),
            payload="x",
            **({"fair_key": f"tenant-{n // per_key % KEYS}"} if keyed else {}),
        )
        for n in range(tasks)
    ]
    conn = db.connect()
    try:
        started = time.perf_counter()
        QueueClient(conn, table).insert_tasks(items)
        conn.commit()
        return time.perf_counter() - started
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=2000)
    bench_mysql.add_database_options(parser)
    args = parser.parse_args()
    for db, dialect in bench_mysql.chosen_databases(args):
        sides = ("plain", "fair")
        names = {side: f"bfair_{side}_{os.getpid()}" for side in sides}
        tables = {
            side: create(db, names[side], render(db.schema, names[side], dialect)) for side in sides
        }
        ratios, rates = [], {side: [] for side in sides}
        enqueued = {side: [] for side in sides}
        try:
            for n in range(args.rounds):
                for side in sides:
                    enqueued[side].append(enqueue(db, tables[side], args.tasks, side == "fair"))
                got = interleaved(db, tables, sides[n % 2])
                for side in sides:
                    rates[side].append(got[side])
                ratios.append(got["fair"] / got["plain"])
                print(
                    f"{db.label} round {n + 1}: drain plain {got['plain']:,.0f}/s fair "
                    f"{got['fair']:,.0f}/s ratio {ratios[-1]:.3f}; enqueue plain "
                    f"{enqueued['plain'][-1]:.2f} s fair {enqueued['fair'][-1]:.2f} s",
                    flush=True,
                )
        finally:
            for table in tables.values():
                db.drop_queue(table)
        print(
            f"{db.label}: drain plain median {statistics.median(rates['plain']):,.0f}/s, fair "
            f"median {statistics.median(rates['fair']):,.0f}/s, fair/plain per round median "
            f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}); enqueue "
            f"of {args.tasks} median plain {statistics.median(enqueued['plain']):.2f} s, fair "
            f"{statistics.median(enqueued['fair']):.2f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
