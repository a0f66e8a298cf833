"""The floor of a transactional group drain: the bare SQL, no library (issue 16).

On a queue table made by our own DDL (db_gen, every index), ``clients``
processes each loop until nothing is left:

1. claim up to ``batch`` ready rows in claim order, skipping rows another
   client holds, set them 'processando', commit;
2. set them 'sucesso' in one UPDATE, commit.

No handler, no liveness lock, no payload read, no retry bookkeeping: what
any queue keeping a task's claim and outcome in the table must at least
send. PostgreSQL claims in one statement (UPDATE ... WHERE id IN (SELECT
... FOR UPDATE SKIP LOCKED) RETURNING); MariaDB has no UPDATE ... RETURNING,
so it reads with SELECT ... FOR UPDATE SKIP LOCKED and then updates the ids.

A client per process (not threads: the Python side of a client costs
CPU too, and our workers are processes); all connect first, then start
together; the rate is the tasks over the wall time from the start until
the last client found nothing left.

    .venv/bin/python benchmarks/drain_floor.py [--clients 2] [--tasks 5000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_mysql import (  # noqa: E402 - the harness next to this file
    DEFAULT_MYSQL_DSN,
    DEFAULT_PG_DSN,
    BenchError,
    Database,
    task_rows,
)

CLAIM_ORDER = "prioridade DESC, data_hora, id"


def _pg_loop(conn, table: str, batch: int, one_write: bool = False) -> int:
    """Two writes: the claim sets the rows 'processando' and commits, then their outcome.
    ``one_write``: the claim only locks the rows, and the open transaction writes their
    outcome alone."""
    ready = (
        f"SELECT id FROM {table} WHERE status = 'pendente' AND data_hora <= now()"
        f" ORDER BY {CLAIM_ORDER} LIMIT {batch} FOR UPDATE SKIP LOCKED"
    )
    claim = (
        ready
        if one_write
        else f"UPDATE {table} SET status = 'processando' WHERE id IN ({ready}) RETURNING id"
    )
    settle = f"UPDATE {table} SET status = 'sucesso' WHERE id = ANY(%s)"
    done = 0
    while True:
        ids = [r[0] for r in conn.execute(claim).fetchall()]
        if not one_write or not ids:
            conn.commit()
        if not ids:
            return done
        conn.execute(settle, (ids,))
        conn.commit()
        done += len(ids)


def _mariadb_loop(conn, table: str, batch: int, one_write: bool = False) -> int:
    idx_claim = f"idx_{table.split('.')[-1]}_claim"
    claim = (
        f"SELECT id FROM {table} FORCE INDEX ({idx_claim})"
        " WHERE status = 'pendente' AND data_hora <= NOW(6)"
        f" ORDER BY {CLAIM_ORDER} LIMIT {batch} FOR UPDATE SKIP LOCKED"
    )
    # InnoDB's SKIP LOCKED read can come back empty while unlocked ready rows remain
    # (seen with three clients: 130 of 230 left). Only a plain read says the queue is empty.
    left = (
        f"SELECT 1 FROM {table} FORCE INDEX ({idx_claim})"
        " WHERE status = 'pendente' AND data_hora <= NOW(6) LIMIT 1"
    )
    done = 0
    with conn.cursor() as cur:

        def claimed() -> str | None:
            cur.execute(claim)
            in_list = ",".join(str(int(r[0])) for r in cur.fetchall())  # the table's own ids
            if in_list:
                cur.execute(f"UPDATE {table} SET status = 'processando' WHERE id IN ({in_list})")
            elif not cur.execute(left):
                in_list = None  # no row is 'pendente' any more
            conn.commit()
            return in_list

        def claimed_and_settled() -> int | None:
            """One write: the claim's lock holds the rows until the outcome's commit; a
            deadlock rolls both back, and the rows go back to the queue."""
            cur.execute(claim)
            in_list = ",".join(str(int(r[0])) for r in cur.fetchall())
            if in_list:
                settled = cur.execute(
                    f"UPDATE {table} SET status = 'sucesso' WHERE id IN ({in_list})"
                )
            else:
                settled = 0 if cur.execute(left) else None
            conn.commit()
            return settled

        while True:
            if one_write:
                settled = _retrying_deadlocks(conn, claimed_and_settled)
                if settled is None:
                    return done
                done += settled
                continue
            in_list = _retrying_deadlocks(conn, claimed)
            if in_list is None:
                return done
            if not in_list:
                continue

            def settle(in_list: str = in_list) -> None:
                cur.execute(f"UPDATE {table} SET status = 'sucesso' WHERE id IN ({in_list})")
                conn.commit()

            _retrying_deadlocks(conn, settle)
            done += in_list.count(",") + 1


def _retrying_deadlocks(conn, step):
    """``step()`` again after InnoDB's deadlocks: its status UPDATEs insert into the claim
    index's gaps that concurrent locking reads hold (REPEATABLE READ's next-key locks), as
    the library's own claims do (it retries them too)."""
    import pymysql

    while True:
        try:
            return step()
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in (1213, 1205):  # deadlock, lock wait timeout
                raise
            conn.rollback()


def _client(db: Database, table: str, batch: int, start, results, one_write: bool) -> None:
    conn = db.connect()
    try:
        if db.kind == "mariadb":
            with conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
            conn.commit()
        start.wait()
        loop = _pg_loop if db.kind == "postgres" else _mariadb_loop
        results.put(loop(conn, table, batch, one_write))
    finally:
        conn.close()


def _result(results, procs, timeout: float = 300.0) -> int:
    """The next client's count; a client that died fails the run at once."""
    import queue

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return results.get(timeout=0.2)
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                raise BenchError("a floor client failed (its traceback is above)") from None
    raise BenchError(f"the floor did not finish in {timeout:.0f} s")


def floor_drain(
    db: Database, clients: int, total: int, batch: int = 50, one_write: bool = False
) -> float:
    """Tasks/s of ``clients`` bare-SQL clients draining ``total`` pre-loaded tasks;
    ``one_write``: the claim locks the rows without writing them (_pg_loop)."""
    from nsj_queue_lib import QueueClient

    ctx = multiprocessing.get_context("fork")
    with db.fresh_queue() as table:
        conn = db.connect()
        try:
            QueueClient(conn, table).insert_tasks(task_rows(total))
            conn.commit()
        finally:
            conn.close()
        start = ctx.Barrier(clients + 1)
        results = ctx.Queue()
        procs = [
            ctx.Process(target=_client, args=(db, table, batch, start, results, one_write))
            for _ in range(clients)
        ]
        for p in procs:
            p.start()
        start.wait(timeout=60)
        t0 = time.perf_counter()
        done = sum(_result(results, procs) for _ in procs)
        elapsed = time.perf_counter() - t0
        for p in procs:
            p.join(30)
            if p.exitcode != 0:
                raise BenchError(f"a floor client exited with {p.exitcode}")
        if done != total:
            raise BenchError(f"the floor drained {done} of {total} tasks")
    return total / elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--designs",
        nargs="+",
        choices=["two-writes", "one-write"],
        default=["two-writes"],
        help="two-writes: claim (processando) and outcome, each committed; one-write: the "
        "claim locks the rows, the outcome is the only write",
    )
    ap.add_argument("--pg-dsn", default=DEFAULT_PG_DSN)
    ap.add_argument("--mysql-dsn", default=DEFAULT_MYSQL_DSN)
    args = ap.parse_args(argv)
    dbs = [Database("postgres", args.pg_dsn), Database("mariadb", args.mysql_dsn)]
    for r in range(args.rounds):
        for db in dbs if r % 2 == 0 else dbs[::-1]:
            for clients in args.clients:
                for design in args.designs:
                    rate = floor_drain(db, clients, args.tasks, args.batch, design == "one-write")
                    print(
                        f"round {r + 1} {db.label} floor ({design}), {clients} clients: "
                        f"{rate:,.0f}/s",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
