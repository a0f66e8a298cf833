"""A 3-node MariaDB Galera drain vs the same workers on one MariaDB (issue 36's target).

Both databases are started here from the installed binaries with the same server
settings (tests/helpers/galera.py; the single one without wsrep). Each round drains
``--tasks`` tasks of 10-30 ms (the handler inserts one row through ``bd_conn``:
tests/acceptance/workers/galera_worker.py) with one socket server and three worker
processes (``QUEUE_CONCURRENCY=2`` each, ``CLIENT_SERVER_MODE=true``):

- galera: worker i connected to node i;
- single: the three workers on the one MariaDB.

Rounds are paired (the order alternates); the table gives each drain's tasks/s and
the ratio galera/single per round, and the median ratio. ``--ms 0`` drains no-op
tasks (the database's cost alone).

    python benchmarks/bench_galera.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.galera import GaleraCluster, galera_cluster_of, galera_unavailable  # noqa: E402
from tests.helpers.galera import connect as node_connect  # noqa: E402
from tests.helpers.mysql_queue import create_queue, drop_queue_tables  # noqa: E402
from tests.helpers.processes import WorkerProcess, clean_env  # noqa: E402
from tests.helpers.server_process import ServerProcess  # noqa: E402

WORKER = ROOT / "tests" / "acceptance" / "workers" / "galera_worker.py"
DATABASE = "test"


def drain(cluster: GaleraCluster, tasks: int, ms: int, seed: int) -> dict:
    admin = node_connect(cluster[0].port)
    queue = create_queue(admin, DATABASE)
    columns = (
        "id bigint AUTO_INCREMENT PRIMARY KEY, task_id bigint NOT NULL, chave varchar(64), "
        "pid int, node varchar(16), started double, ended double"
    )
    with admin.cursor() as cur:
        for suffix in ("_exec", "_runs"):
            cur.execute(f"CREATE TABLE {queue.table}{suffix} ({columns})")
    directory = Path(tempfile.mkdtemp(prefix="nsjq-bench-galera-"))
    server = ServerProcess(
        directory / "server",
        env={
            "DB_DRIVER": "MYSQL",
            "DB_HOST": "127.0.0.1",
            "DB_PORT": str(cluster[0].port),
            "DB_BASE": DATABASE,
            "DB_USER": "root",
            "QUEUE_NAME": queue.name,
            "QUEUE_TABLE": queue.table,
            "CHECK_TASKS_INTERVAL": "0.5",
        },
    ).start()
    workers = []
    try:
        for i in range(3):
            node = cluster[i % len(cluster.nodes)]
            env = clean_env(
                DB_DRIVER="MYSQL",
                DB_HOST="127.0.0.1",
                DB_PORT=str(node.port),
                DB_BASE=DATABASE,
                DB_USER="root",
                DB_PASS="",
                QUEUE_NAME=queue.name,
                QUEUE_TABLE=queue.table,
                QUEUE_CONCURRENCY="2",
                QUEUE_WAIT_NOTIFY_INTERVAL="1",
                QUEUE_RETRY_THREAD_INTERVAL="60",
                CLIENT_SERVER_MODE="true",
                SERVER_HOST="127.0.0.1",
                NOTIFY_SERVICE_PORT=str(server.notify_port),
                LOCK_SERVICE_PORT=str(server.lock_port),
                QUEUE_SERVER_TOKEN=str(server.token),
                GALERA_EXEC_TABLE=f"{queue.table}_exec",
                GALERA_RUNS_TABLE=f"{queue.table}_runs",
                GALERA_NODE=node.name,
                PYTHONPATH=str(ROOT),
            )
            workers.append(WorkerProcess(WORKER, env, f"w{i + 1}"))
        time.sleep(3.0)  # bound, subscribed to the server, pools open
        dead = [w.name for w in workers if not w.alive()]
        if dead:
            raise RuntimeError(f"workers exited at start: {dead}: {workers[0].output()[-2000:]}")
        from nsj_queue_lib.queue_client import QueueClient

        rng = random.Random(seed)
        conn = node_connect(cluster[0].port)
        conn.autocommit(False)
        QueueClient(conn, queue.table).insert_tasks(
            [
                dict(
                    origem="bench",
                    destino="worker",
                    processo="galera",
                    chave_externa=f"k{i}",
                    payload=json.dumps({"ms": rng.randint(10, 30) if ms else 0}),
                )
                for i in range(tasks)
            ]
        )
        conn.commit()
        began = time.monotonic()
        conn.autocommit(True)
        while True:
            with conn.cursor() as cur:
                # Settled: 'sucesso', or 'falha' (a retry is due later: see docs/how-to/galera.md).
                cur.execute(
                    f"SELECT count(DISTINCT chave_externa) FROM {queue.table} "
                    "WHERE status IN ('sucesso', 'falha')"
                )
                done = int(cur.fetchone()[0])
            if done >= tasks:
                break
            if time.monotonic() - began > 300:
                raise RuntimeError(f"drain not done in 300 s ({done} of {tasks})")
            time.sleep(0.05)
        seconds = time.monotonic() - began
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT count(*) FROM (SELECT chave FROM {queue.table}_exec GROUP BY chave "
                "HAVING count(*) > 1) d"
            )
            doubles = int(cur.fetchone()[0])
            cur.execute(f"SELECT count(*) FROM {queue.table} WHERE status = 'falha'")
            failed = int(cur.fetchone()[0])
        conn.close()
        return {
            "seconds": seconds,
            "tasks_per_second": tasks / seconds,
            "doubles": doubles,
            "failed": failed,
        }
    finally:
        for w in workers:
            w.close()
        server.cleanup()
        drop_queue_tables(admin, DATABASE, queue.name)
        with admin.cursor() as cur:
            for suffix in ("_exec", "_runs"):
                cur.execute(f"DROP TABLE IF EXISTS {queue.table}{suffix}")
        admin.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--ms", type=int, default=1, help="0: no-op tasks; else 10-30 ms each")
    args = parser.parse_args()
    reason = galera_unavailable()
    if reason:
        print(f"skipped: {reason}")
        return 0
    rows = []
    with galera_cluster_of(3) as galera, galera_cluster_of(1, wsrep=False) as single:
        print(f"galera cluster started in {galera.start_seconds:.1f} s")
        for r in range(args.rounds):
            order = [("galera", galera), ("single", single)]
            if r % 2:
                order.reverse()
            got = {name: drain(c, args.tasks, args.ms, seed=r) for name, c in order}
            ratio = got["galera"]["tasks_per_second"] / got["single"]["tasks_per_second"]
            rows.append((r + 1, got["galera"], got["single"], ratio))
            print(
                f"round {r + 1}: galera {got['galera']['tasks_per_second']:.0f}/s "
                f"({got['galera']['doubles']} doubles, {got['galera']['failed']} failed), single "
                f"{got['single']['tasks_per_second']:.0f}/s ({got['single']['doubles']} doubles), "
                f"ratio {ratio:.2f}",
                flush=True,
            )
    print(f"median ratio galera/single: {statistics.median(r[3] for r in rows):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
