"""MariaDB Galera: 3 nodes started by the tests, workers on every node (issue 36).

On Galera ``GET_LOCK`` holds on one node only, so a worker refuses to start there
unless its liveness locks live in the socket server (``CLIENT_SERVER_MODE``) or
``QUEUE_GALERA_WRITER_NODE`` names the node it writes through
(nsj_queue_lib/db/mysql/galera.py). The drains here run one socket server for
the cluster and one worker process per node (``QUEUE_CONCURRENCY=2``) on 2,000
tasks of 10-30 ms whose handler inserts one row through ``bd_conn``
(workers/galera_worker.py):

- a worker killed (``kill -9``) and started again mid-drain;
- a node killed (``kill -9`` of its mariadbd) and its worker replaced by one on
  a surviving node.

Each checks that every task's handler writes committed exactly once (the side
table grouped by ``chave_externa``: a rescued attempt is a new row), nothing is
left pending or running, and no two runs of one task overlapped (every run that
reached its end is recorded on an autocommit connection, committed or not).
The cluster is shared by the module (tests/helpers/galera.py); it skips with the
reason where galera-4 or MariaDB is missing, and fails instead under CI=true.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from typing import Any

import pytest

from tests.helpers.galera import GaleraCluster, status
from tests.helpers.galera import connect as node_connect
from tests.helpers.mysql_queue import create_queue, drop_queue_tables, fetch_value
from tests.helpers.processes import ROOT, WorkerProcess, clean_env, wait_for, workers_of
from tests.helpers.server_process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("galera"), pytest.mark.timeout(420)]

WORKER = ROOT / "tests" / "acceptance" / "workers" / "galera_worker.py"
DATABASE = "test"
# Each test kills a node or a worker a third of the way through the drain. GALERA_TASKS=2000
# (the size of the first runs) drains twice as long.
TASKS = int(os.environ.get("GALERA_TASKS", "1000"))
EXIT_CONFIG_ERROR = 2


# -- set-up -----------------------------------------------------------------------------------


class GaleraQueue:
    """A queue made by db_gen through node 1 (DDL replicates to every node), with the
    handler's side table (``_exec``, committed runs) and the record of every run (``_runs``)."""

    def __init__(self, cluster: GaleraCluster) -> None:
        self.cluster = cluster
        self.admin = node_connect(cluster[0].port)
        self.queue = create_queue(self.admin, DATABASE)
        self.table = self.queue.table
        self.exec_table = f"{self.table}_exec"
        self.runs_table = f"{self.table}_runs"
        columns = (
            "id bigint AUTO_INCREMENT PRIMARY KEY, task_id bigint NOT NULL, chave varchar(64), "
            "pid int, node varchar(16), started double, ended double"
        )
        with self.admin.cursor() as cur:
            cur.execute(f"CREATE TABLE {self.exec_table} ({columns})")
            cur.execute(f"CREATE TABLE {self.runs_table} ({columns})")

    def node_with_admin(self) -> Any:
        """An autocommit connection to a live node (node 1 may be the one killed)."""
        for node in self.cluster.nodes:
            if node.alive():
                try:
                    return node_connect(node.port)
                except Exception:  # any error: try the next node
                    continue
        raise AssertionError("no Galera node answers")

    def enqueue(self, count: int, seed: int) -> None:
        """``count`` tasks of 10-30 ms, keys k0..k<count-1>, in one commit (through node 1)."""
        from nsj_queue_lib.queue_client import QueueClient

        rng = random.Random(seed)
        conn = node_connect(self.cluster[0].port)
        conn.autocommit(False)
        try:
            QueueClient(conn, self.table).insert_tasks(
                [
                    dict(
                        origem="teste",
                        destino="worker",
                        processo="galera",
                        chave_externa=f"k{i}",
                        payload=json.dumps({"ms": rng.randint(10, 30)}),
                    )
                    for i in range(count)
                ]
            )
            conn.commit()
        finally:
            conn.close()

    def statuses(self, conn) -> dict[str, int]:
        with conn.cursor() as cur:
            cur.execute(f"SELECT status, count(*) FROM {self.table} GROUP BY status")
            return {s: int(n) for s, n in cur.fetchall()}

    def keys_done(self, conn) -> int:
        return int(
            fetch_value(
                conn,
                f"SELECT count(DISTINCT chave_externa) FROM {self.table} WHERE status = 'sucesso'",
            )
        )

    def close(self) -> None:
        try:
            conn = self.node_with_admin()
            drop_queue_tables(conn, DATABASE, self.queue.name)
            with conn.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS {self.exec_table}")
                cur.execute(f"DROP TABLE IF EXISTS {self.runs_table}")
            conn.close()
        finally:
            self.admin.close()


@pytest.fixture
def queue(galera_cluster):
    q = GaleraQueue(galera_cluster)
    yield q
    q.close()


@pytest.fixture
def workers(request, tmp_path):
    """Worker processes, killed at the end; their logs are kept in the test's tmp_path
    (pytest keeps the last runs' under /tmp/pytest-of-<user>/) as the drains' evidence."""
    with workers_of(request) as started:
        yield started
        for worker in started.started:
            (tmp_path / f"{worker.name}.log").write_text(worker.output())


@pytest.fixture
def lock_server(tmp_path, galera_cluster, queue):
    """One socket server for the whole cluster (its check-tasks poll reads node 1)."""
    server = ServerProcess(
        tmp_path / "server",
        env={
            "DB_DRIVER": "MYSQL",
            "DB_HOST": "127.0.0.1",
            "DB_PORT": str(galera_cluster[0].port),
            "DB_BASE": DATABASE,
            "DB_USER": "root",
            "QUEUE_NAME": queue.queue.name,
            "QUEUE_TABLE": queue.table,
            "CHECK_TASKS_INTERVAL": "0.5",
        },
    )
    server.start()
    yield server
    server.cleanup()


def worker_env(queue: GaleraQueue, node_index: int, server: ServerProcess | None, **extra: Any):
    node = queue.cluster[node_index]
    env = clean_env(
        DB_DRIVER="MYSQL",
        DB_HOST="127.0.0.1",
        DB_PORT=str(node.port),
        DB_BASE=DATABASE,
        DB_USER="root",
        DB_PASS="",
        QUEUE_NAME=queue.queue.name,
        QUEUE_TABLE=queue.table,
        QUEUE_CONCURRENCY="2",
        QUEUE_WAIT_NOTIFY_INTERVAL="1",
        QUEUE_RETRY_THREAD_INTERVAL="1",
        QUEUE_NOTIFY_THREAD_INTERVAL="3600",
        QUEUE_PURGE_THREAD_INTERVAL="3600",
        QUEUE_BASE_INTERVAL_RETRY="0.001",
        GALERA_EXEC_TABLE=queue.exec_table,
        GALERA_RUNS_TABLE=queue.runs_table,
        GALERA_NODE=node.name,
        PYTHONPATH=str(ROOT),
    )
    if server is not None:
        env.update(
            CLIENT_SERVER_MODE="true",
            SERVER_HOST="127.0.0.1",
            NOTIFY_SERVICE_PORT=str(server.notify_port),
            LOCK_SERVICE_PORT=str(server.lock_port),
            QUEUE_SERVER_TOKEN=str(server.token),
            # The retry service's grace after a lock looks free: 2 x this + 1 s.
            TIMEOUT_SOCKET_MESSAGE="2",
        )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start_worker(workers, queue, node_index, server, name, **extra) -> WorkerProcess:
    return workers.start(WORKER, worker_env(queue, node_index, server, **extra), name)


def wait_started(worker: WorkerProcess, timeout: float = 30) -> None:
    wait_for(
        lambda: "on MariaDB Galera node" in worker.output() or not worker.alive(),
        timeout,
        f"{worker.name} to bind its queue",
    )
    assert worker.alive(), worker.output()[-3000:]


# -- what a drain left ------------------------------------------------------------------------


def cert_counters(cluster: GaleraCluster) -> dict[str, tuple[int, int]]:
    """{node: (wsrep_local_cert_failures, wsrep_local_bf_aborts)} of the live nodes."""
    found = {}
    for node in cluster.nodes:
        if node.alive():
            found[node.name] = (
                int(status(node.port, "wsrep_local_cert_failures") or 0),
                int(status(node.port, "wsrep_local_bf_aborts") or 0),
            )
    return found


LOG_EVENTS = {
    "rescued": "rescued an abandoned attempt",
    "fenced (rolled back at settle)": "no longer 'processando' when it finished",
    "deadlock / certification (1213)": "1213",
    "lock wait timeout (1205)": "1205",
    "WSREP not ready (1047)": "1047",
    "HandlerTransactionError": "HandlerTransactionError",
    "ERROR lines": " ERROR ",
    "Traceback": "Traceback",
}


def log_events(workers) -> dict[str, dict[str, int]]:
    """{worker: {event: lines}} from the workers' logs."""
    found: dict[str, dict[str, int]] = {}
    for worker in workers.started:
        lines = worker.output().splitlines()
        counts = {
            event: sum(1 for line in lines if needle in line)
            for event, needle in LOG_EVENTS.items()
        }
        found[worker.name] = {k: v for k, v in counts.items() if v}
    return found


def error_samples(workers, limit: int = 12) -> list[str]:
    """A few distinct warning/error lines of the workers (numbers masked), for the report."""
    seen: dict[str, str] = {}
    for worker in workers.started:
        for line in worker.output().splitlines():
            if " WARNING " in line or " ERROR " in line or "Error" in line:
                key = re.sub(r"\d+", "#", line.split(": ", 1)[-1])[:160]
                seen.setdefault(key, f"{worker.name}: {line[-300:]}")
    return list(seen.values())[:limit]


def overlapping_runs(conn, queue: GaleraQueue) -> list[tuple]:
    """Pairs of runs of one task (chave) whose [started, ended] intersect."""
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT a.chave, a.node, b.node, a.started, a.ended, b.started, b.ended "
            f"FROM {queue.runs_table} a JOIN {queue.runs_table} b "
            f"ON a.chave = b.chave AND a.id < b.id "
            f"AND a.started < b.ended AND b.started < a.ended"
        )
        return list(cur.fetchall())


def drain_report(conn, queue: GaleraQueue, workers, before, cluster, seconds) -> dict[str, Any]:
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT chave, count(*) FROM {queue.exec_table} GROUP BY chave HAVING count(*) <> 1"
        )
        doubles = {k: int(n) for k, n in cur.fetchall()}
        cur.execute(f"SELECT count(DISTINCT chave), count(*) FROM {queue.exec_table}")
        keys, rows = cur.fetchone()
        cur.execute(f"SELECT node, count(*) FROM {queue.exec_table} GROUP BY node")
        per_node = {n: int(c) for n, c in cur.fetchall()}
        cur.execute(f"SELECT count(*) FROM {queue.runs_table}")
        runs = int(cur.fetchone()[0])
    after = cert_counters(cluster)
    report = {
        "seconds": round(seconds, 1),
        "tasks_per_second": round(TASKS / seconds, 1),
        "statuses": queue.statuses(conn),
        "keys_committed": int(keys),
        "exec_rows": int(rows),
        "double_commits": doubles,
        "commits_per_node": per_node,
        "runs_recorded": runs,
        "overlapping_runs": overlapping_runs(conn, queue),
        "cert_failures_bf_aborts_per_node": {
            n: (after[n][0] - before.get(n, (0, 0))[0], after[n][1] - before.get(n, (0, 0))[1])
            for n in after
        },
        "log_events": log_events(workers),
        "error_samples": error_samples(workers),
    }
    print("\nGALERA DRAIN REPORT " + json.dumps(report, default=str, indent=1))
    return report


def wait_drained(queue: GaleraQueue, timeout: float = 150) -> None:
    def drained():
        conn = queue.node_with_admin()
        try:
            s = queue.statuses(conn)
            done = queue.keys_done(conn)
        finally:
            conn.close()
        busy = sum(s.get(k, 0) for k in ("pendente", "processando", "agendada"))
        return (done == TASKS and busy == 0) or False

    wait_for(drained, timeout, f"{TASKS} keys to end 'sucesso' with nothing pending", interval=0.5)


def assert_exactly_once(report: dict[str, Any], workers) -> None:
    assert report["keys_committed"] == TASKS, report
    assert not report["overlapping_runs"], report["overlapping_runs"][:10]
    assert report["double_commits"] == {}, (
        f"{len(report['double_commits'])} tasks had their handler's writes committed more "
        f"than once: {dict(list(report['double_commits'].items())[:20])}; "
        f"events: {report['log_events']}"
    )
    assert report["exec_rows"] == TASKS
    assert report["statuses"].get("processando", 0) == 0


# -- start: the refusal -----------------------------------------------------------------------


def test_a_worker_on_galera_without_the_socket_server_refuses_to_start_naming_get_lock(
    galera_cluster, queue, workers
):
    worker = start_worker(workers, queue, 1, None, "refused")
    assert worker.wait(60) == EXIT_CONFIG_ERROR, worker.output()[-3000:]
    last = worker.last_line()
    assert "CLIENT_SERVER_MODE: must be true on MariaDB Galera node 'node2'" in last, last
    assert "GET_LOCK" in last and "nsj_queue_lib.server" in last and "galera.md" in last, last


def test_a_writer_node_setting_naming_another_node_is_refused_and_the_right_one_runs(
    galera_cluster, queue, workers
):
    wrong = start_worker(workers, queue, 1, None, "wrong", QUEUE_GALERA_WRITER_NODE="node1")
    assert wrong.wait(60) == EXIT_CONFIG_ERROR, wrong.output()[-3000:]
    assert "QUEUE_GALERA_WRITER_NODE: names 'node1'" in wrong.last_line(), wrong.last_line()

    right = start_worker(workers, queue, 0, None, "writer", QUEUE_GALERA_WRITER_NODE="node1")
    wait_started(right)
    queue.enqueue(20, seed=1)
    wait_for(lambda: queue.keys_done(queue.admin) == 20, 30, "the writer node's worker to drain")
    right.send(signal.SIGTERM)
    assert right.wait(30) == 0


def test_a_worker_on_galera_with_the_socket_server_starts(
    galera_cluster, queue, workers, lock_server
):
    worker = start_worker(workers, queue, 2, lock_server, "served")
    wait_started(worker)
    assert "liveness locks in the socket server" in worker.output()
    worker.send(signal.SIGTERM)
    assert worker.wait(30) == 0


# -- the drains ---------------------------------------------------------------------------------


def test_workers_on_every_node_drain_exactly_once_with_a_worker_killed_and_restarted(
    galera_cluster, queue, workers, lock_server
):
    procs = [start_worker(workers, queue, i, lock_server, f"w{i + 1}") for i in range(3)]
    for proc in procs:
        wait_started(proc)
    before = cert_counters(galera_cluster)
    began = time.monotonic()
    queue.enqueue(TASKS, seed=36)
    wait_for(
        lambda: queue.keys_done(queue.admin) >= TASKS // 3, 90, "a third of the drain", interval=0.1
    )
    procs[1].kill9()
    time.sleep(0.5)
    start_worker(workers, queue, 1, lock_server, "w2-restarted")
    wait_drained(queue)
    seconds = time.monotonic() - began
    report = drain_report(queue.admin, queue, workers, before, galera_cluster, seconds)
    assert_exactly_once(report, workers)


def test_a_node_killed_mid_drain_and_its_worker_replaced_on_a_surviving_node(
    galera_cluster, queue, workers, lock_server
):
    procs = [start_worker(workers, queue, i, lock_server, f"w{i + 1}") for i in range(3)]
    for proc in procs:
        wait_started(proc)
    before = cert_counters(galera_cluster)
    began = time.monotonic()
    queue.enqueue(TASKS, seed=37)
    wait_for(
        lambda: queue.keys_done(queue.admin) >= TASKS // 3, 90, "a third of the drain", interval=0.1
    )
    try:
        galera_cluster.kill(2)  # kill -9 of node 3's mariadbd
        galera_cluster.wait_size(2, timeout=60)
        procs[2].kill9()  # its worker is replaced by one on node 2
        start_worker(workers, queue, 1, lock_server, "w3-on-node2")
        wait_drained(queue)
        seconds = time.monotonic() - began
        report = drain_report(queue.admin, queue, workers, before, galera_cluster, seconds)
    finally:
        galera_cluster.restart(2)  # the module's cluster is whole again
    assert_exactly_once(report, workers)
