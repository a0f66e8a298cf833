"""What the pause check costs a claim (issue 43): the claim routine of a tree without it
against this tree's, on one connection each, in paired rounds.

    git archive <before-the-pause> | tar -x -C /tmp/before
    .venv/bin/python benchmarks/bench_pause_claim.py --old /tmp/before --rounds 7

Each round makes ``--tasks`` ready tasks in two queues of one database, one created by
the old tree's ``db_gen`` and one by this tree's, then drains both with their claim
routines alone (a claim-and-complete call per task, PostgreSQL's function in a
transaction per call, committed with ``synchronous_commit = off`` so that the claim's own
cost is what is timed; MariaDB's procedure, which commits itself), alternating call by
call on two connections, so that both sides meet the same moments of this VM. The ratio
new/old of the drain rates is taken within the round (this VM's speed drifts) and the
medians printed. No worker process, no handler: the claim statement itself.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_mysql

from nsj_queue_lib.db.dialect import DdlNames
from nsj_queue_lib.db.mysql.dialect import split_script
from nsj_queue_lib.db_gen import render

_RENDER = "import sys; from nsj_queue_lib.db_gen import render; print(render(*sys.argv[1:]))"


def old_ddl(tree: Path, schema: str, name: str, dialect: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(tree))
    args = [sys.executable, "-c", _RENDER, schema, name, dialect]
    return subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout


def create(db: bench_mysql.Database, name: str, ddl: str) -> str:
    admin = db.connect(autocommit=True)
    try:
        if db.kind == "postgres":
            admin.execute(ddl)
        else:
            for statement in split_script(ddl):
                db.execute(admin, statement)
    finally:
        admin.close()
    return f"{db.schema}.{name}"


def fill(db: bench_mysql.Database, table: str, tasks: int) -> None:
    conn = db.connect(autocommit=True)
    try:
        sql = f"INSERT INTO {table} (processo, payload) VALUES " + ", ".join(
            ["('bench', 'x')"] * tasks
        )
        db.execute(conn, sql)
    finally:
        conn.close()


class Drain:
    """One queue's claim routine on a connection of its own: ``step`` claims the next task
    and completes the one before, timed."""

    def __init__(self, db: bench_mysql.Database, table: str):
        self.db = db
        name = table.split(".")[-1]
        self.routine = f"{db.schema}.{DdlNames.routine_name(name, 2)}"
        self.conn = db.connect(autocommit=db.kind != "postgres")
        if db.kind == "postgres":  # the claim's cost, not the WAL flush's (session only)
            db.execute(self.conn, "SET synchronous_commit = off")
            self.conn.commit()
        self.done = None
        self.seconds = 0.0
        self.calls = 0

    def step(self) -> bool:
        """One claim-and-complete call; False once nothing was claimed."""
        started = time.perf_counter()
        with self.conn.cursor() as cur:
            if self.db.kind == "postgres":
                cur.execute(
                    f"SELECT (f.task).id FROM {self.routine}(%s, 'ok', 4242, %s, 1, NULL, NULL,"
                    " 'bench') AS f",
                    (self.done, None if self.done is None else self.done % 2147483648),
                )
                row = cur.fetchone()
                self.conn.commit()
                self.done = None if row is None else row[0]
            else:
                cur.execute(
                    f"CALL {self.routine}(%s, 'ok', 'nsjq_bench_', NULL, NULL, 'bench')",
                    (self.done,),
                )
                row = cur.fetchone()
                while cur.nextset():
                    pass
                self.done = json.loads(row[0])["id"] if row and row[0] else None
        self.seconds += time.perf_counter() - started
        self.calls += 1
        return self.done is not None

    def close(self) -> None:
        if self.db.kind != "postgres":
            self.conn.commit()
        self.conn.close()


def interleaved(db: bench_mysql.Database, tables: dict[str, str], first: str) -> dict[str, float]:
    """Drain both queues call by call, alternating (``first`` starts): the two sides see the
    same moments of this VM's drifting speed. Tasks per second of claim time, per side."""
    drains = {side: Drain(db, table) for side, table in tables.items()}
    order = [first, *(side for side in drains if side != first)]
    try:
        going = set(order)
        while going:
            for side in order:
                if side in going and not drains[side].step():
                    going.discard(side)
    finally:
        for d in drains.values():
            d.close()
    return {side: d.calls / d.seconds for side, d in drains.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tasks", type=int, default=2000)
    bench_mysql.add_database_options(parser)
    args = parser.parse_args()
    for db, dialect in bench_mysql.chosen_databases(args):
        names = {side: f"bpc_{side}_{os.getpid()}" for side in ("old", "new")}
        tables = {
            "old": create(db, names["old"], old_ddl(args.old, db.schema, names["old"], dialect)),
            "new": create(db, names["new"], render(db.schema, names["new"], dialect)),
        }
        ratios, rates = [], {"old": [], "new": []}
        try:
            for n in range(args.rounds):
                for side in ("old", "new"):
                    fill(db, tables[side], args.tasks)
                got = interleaved(db, tables, "old" if n % 2 == 0 else "new")
                for side in ("old", "new"):
                    rates[side].append(got[side])
                ratios.append(got["new"] / got["old"])
                print(
                    f"{db.label} round {n + 1}: old {got['old']:,.0f}/s new {got['new']:,.0f}/s "
                    f"ratio {ratios[-1]:.3f}",
                    flush=True,
                )
        finally:
            for table in tables.values():
                db.drop_queue(table)
        print(
            f"{db.label}: old median {statistics.median(rates['old']):,.0f}/s, new median "
            f"{statistics.median(rates['new']):,.0f}/s, new/old per round median "
            f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
