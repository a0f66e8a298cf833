"""What the partitioned MariaDB layout's finished_day trigger costs a settle (issue 39).

MariaDB triggers have no WHEN, so the BEFORE UPDATE trigger that keeps finished_day in
step with status (db/mysql/day_trigger.sql) runs on every update of the queue table. Each
run settles ``--rows`` 'processando' rows of a fresh partitioned queue as this library's
settles do (setting finished_day themselves, so each row moves to today's partition),
once with the trigger and once without it, alternating: in one statement (the server's
cost per row) and one statement per row in one transaction (as a worker settles).

    .venv/bin/python benchmarks/bench_trigger_mysql.py --rows 20000 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_mysql import DEFAULT_MYSQL_DSN, Database  # noqa: E402

from nsj_queue_lib.db.dialect import DdlNames  # noqa: E402

SETTLE = (
    "UPDATE {table} SET status = 'sucesso', mensagem = 'ok', finished_at = NOW(6), "
    "finished_day = UNIX_TIMESTAMP(NOW(6)) DIV 86400 "
    "WHERE finished_day = 1 AND status = 'processando'{one}"
)


def settle(db: Database, rows: int, trigger: bool, one_by_one: bool) -> float:
    """Microseconds per settled row."""
    with db.fresh_queue() as table:
        conn = db.connect(autocommit=True)
        try:
            name = table.split(".")[-1]
            if not trigger:
                trigger_name = DdlNames(db.schema, name).object_names()["day_trigger"]
                db.execute(conn, f"DROP TRIGGER {db.schema}.{trigger_name}")
            db.execute(
                conn,
                f"INSERT INTO {table} (processo, payload, status) "
                f"SELECT 'p', REPEAT('x', 100), 'processando' FROM seq_1_to_{rows}",
            )
            ids = [row[0] for row in db.execute(conn, f"SELECT id FROM {table}")]
            conn.begin()
            started = time.perf_counter()
            if one_by_one:
                for task_id in ids:
                    db.execute(conn, SETTLE.format(table=table, one=" AND id = %s"), (task_id,))
            else:
                db.execute(conn, SETTLE.format(table=table, one=""))
            took = time.perf_counter() - started
            conn.commit()
            left = db.execute(conn, f"SELECT count(*) FROM {table} PARTITION (p_hot)")[0][0]
            if left:
                raise RuntimeError(f"{left} rows left in p_hot")
            return took / rows * 1e6
        finally:
            conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_MYSQL_DSN)
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    db = Database("mariadb", args.dsn, "partitioned")
    for one_by_one in (False, True):
        got: dict[bool, list[float]] = {True: [], False: []}
        for run in range(args.runs):
            for trigger in (True, False) if run % 2 == 0 else (False, True):
                got[trigger].append(settle(db, args.rows, trigger, one_by_one))
        shape = "one statement per row" if one_by_one else "one statement"
        for trigger in (False, True):
            runs = ", ".join(f"{value:.1f}" for value in got[trigger])
            print(
                f"{shape}, {'with' if trigger else 'without'} the trigger: "
                f"median {statistics.median(got[trigger]):.1f} µs/row ({runs})"
            )


if __name__ == "__main__":
    main()
