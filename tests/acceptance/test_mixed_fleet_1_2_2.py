"""A fleet of nsj-queue-lib 1.2.2 workers and ours on one queue runs every task once.

For real, as docs/upgrading.md describes the roll: a queue made by 1.2.2's
``db_gen``, a 1.2.2 worker process (installed from the package index, see
tests/helpers/legacy.py) serving it, ``db_gen --upgrade`` applied while that
worker runs a task, then worker processes of this library next to it
(QUEUE_COMPAT_1_2_2 left at AUTO: the table is recognised as 1.2.2's). Tasks
outlive both sides' rescue periods (ours: 1 s; 1.2.2's retry thread: every
15 s). Every worker runs the same 1.2.2-style handler
(workers/legacy_style_worker.py), which writes one row per execution through
``DBAdapter3(bd_conn.conn)`` in the task's transaction: a task ran once when
its chain has exactly one such row, and a killed attempt was rescued once
when its chain holds exactly one 'falha_processando' attempt.
"""

from __future__ import annotations

import json
import secrets
import socket
import time
from pathlib import Path

import pytest

from nsj_queue_lib.db.dialect import DdlNames
from nsj_queue_lib.db.postgres import migration
from nsj_queue_lib.db_gen import render
from tests.helpers.databases import connect_pg
from tests.helpers.legacy import LEGACY_KEYS, VENV, legacy_client, legacy_worker_env
from tests.helpers.processes import enqueue, wait_for, worker_env, workers_of
from tests.helpers.server_process import ServerProcess, free_port, pg_env

pytestmark = [pytest.mark.slow, LEGACY_KEYS]

WORKER = "legacy_style_worker.py"
LONG = 19  # seconds: longer than 1.2.2's retry period (15 s), and ours (1 s)
# seconds tasks run while 1.2.2's retry thread is to see them running: two of its periods
# and some, so that a check its thread makes late on a loaded machine still finds them.
TWO_CHECKS = 35
COMPAT_LINE = "compatible with nsj-queue-lib 1.2.2 workers"
# seconds a process may take to start or pick a task up: generous, because a loaded CI
# machine (load 11, other tests' workers) once took more than 15 s to start 1.2.2's worker.
START = 45


@pytest.fixture
def workers(request, legacy_queue):
    with workers_of(request) as started:
        yield started


@pytest.fixture
def fleet(legacy_queue, pg_admin, pg_dsn, legacy_python, workers, tmp_path):
    """Start workers of either library on the 1.2.2 queue, with its side tables."""
    table = legacy_queue.table
    pg_admin.execute(
        f"CREATE TABLE {table}_effects (task_id bigint, id_inicial bigint, side text, pid int);"
        f"CREATE TABLE {table}_started (task_id bigint, id_inicial bigint, side text, pid int)"
    )
    # A queue in use: its ids are past 1-3, the keys of 1.2.2's own maintenance threads, and
    # at a random offset, since 1.2.2's task keys (the bare id) are database-wide: another
    # test run's 1.2.2 tasks on the same server must not hold ours.
    start = 1000 + secrets.randbelow(10**9)
    pg_admin.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", (table, start))
    side_tables = dict(TEST_EFFECTS_TABLE=f"{table}_effects", TEST_STARTED_TABLE=f"{table}_started")

    class Fleet:
        queue = legacy_queue
        processes = workers

        def legacy(self, name: str, script: str | Path = WORKER, **extra: str):
            env = legacy_worker_env(pg_dsn, legacy_queue, TEST_SIDE=name, **side_tables, **extra)
            return workers.start(script, env, name, python=legacy_python, cwd=tmp_path)

        def ours(self, name: str, ready: str = COMPAT_LINE, **overrides):
            short = dict(
                QUEUE_RETRY_THREAD_INTERVAL=1,
                QUEUE_NOTIFY_THREAD_INTERVAL=1,
                QUEUE_WAIT_NOTIFY_INTERVAL=1,
                QUEUE_MAX_RETRY=5,
            )
            env = worker_env(
                pg_dsn,
                table,
                legacy_queue.name,
                TEST_SIDE=name,
                **side_tables,
                **{**short, **overrides},
            )
            worker = workers.start(WORKER, env, name)
            wait_for(lambda: ready in worker.output(), START, f"{name} to start ({ready!r})")
            return worker

    try:
        yield Fleet()
    finally:
        pg_admin.execute(f"DROP TABLE {table}_effects; DROP TABLE {table}_started")


def _started(conn, queue) -> list[dict]:
    cur = conn.execute(f"SELECT task_id, side FROM {queue.table}_started")
    return [dict(task_id=task_id, side=side) for task_id, side in cur.fetchall()]


def _started_by(conn, queue, task_id: int, side: str) -> bool:
    return any(r["task_id"] == task_id and r["side"] == side for r in _started(conn, queue))


def _listening(conn, queue) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE %s", (f"LISTEN {queue.name}",)
    ).fetchone()
    return row[0] > 0


def _chains(conn, queue, firsts: list[int]) -> dict[int, list[tuple[int, str, int]]]:
    """{first attempt's id: [(tentativa, status, committed effects)] in attempt order}."""
    rows = conn.execute(
        f"SELECT coalesce(t.id_inicial, t.id), t.tentativa, t.status, "
        f"(SELECT count(*) FROM {queue.table}_effects AS e WHERE e.task_id = t.id) "
        f"FROM {queue.table} AS t WHERE coalesce(t.id_inicial, t.id) = ANY(%s) ORDER BY t.id",
        (firsts,),
    ).fetchall()
    chains: dict[int, list[tuple[int, str, int]]] = {first: [] for first in firsts}
    for first, tentativa, status, effects in rows:
        chains[first].append((tentativa, status, effects))
    return chains


def _settled(conn, queue, firsts: list[int]) -> bool:
    return all(
        chain and chain[-1][1] == "sucesso" for chain in _chains(conn, queue, firsts).values()
    )


def _task(key: str, sleep: float) -> dict:
    return dict(payload=json.dumps({"sleep": sleep}), chave_externa=key)


def test_upgrade_while_1_2_2_runs_then_a_mixed_fleet_runs_each_task_once(
    fleet, pg_dsn, pg_autocommit, legacy_python, tmp_path
):
    queue = fleet.queue
    legacy = fleet.legacy("legacy")
    wait_for(lambda: _listening(pg_autocommit, queue), 20, "the 1.2.2 worker to listen")
    # Before the upgrade the table is 1.2.2's: 1.2.2's client enqueues.
    # t1 outlasts t2-t4's start by two 1.2.2 retry periods, under load too: that check must
    # see all four running, and the kill below must find t1 still running.
    t1 = dict(origem="o", destino="d", processo="p", chave_externa="t1", payload='{"sleep": 90}')
    legacy_client(legacy_python, tmp_path, pg_dsn, queue, [t1])
    [(first,)] = pg_autocommit.execute(f"SELECT id FROM {queue.table}").fetchall()
    assert first > 3
    wait_for(lambda: _started_by(pg_autocommit, queue, first, "legacy"), START, "1.2.2 to start t1")

    # db_gen --upgrade while the 1.2.2 worker runs a task: nothing waits on it for long.
    began = time.monotonic()
    with connect_pg(pg_dsn, "psycopg") as conn:
        conn.execute("SET lock_timeout = '5s'")
        conn.execute(render("public", queue.name, upgrade=True))
        conn.commit()
    assert time.monotonic() - began < 5

    ours = [fleet.ours("ours-a", QUEUE_CONCURRENCY=3), fleet.ours("ours-b")]
    rest = enqueue(pg_dsn, queue.table, [_task(f"t{n}", TWO_CHECKS) for n in (2, 3, 4)])
    wait_for(
        lambda: {r["task_id"] for r in _started(pg_autocommit, queue)} >= set(rest),
        15,
        "our workers to start t2-t4",
    )
    # 1.2.2's retry thread looks at the running tasks (ours and its own) and leaves them.
    wait_for(
        lambda: "Quantidade de tarefas pendentes, a verificar: 4" in legacy.output(),
        TWO_CHECKS - 3,
        "1.2.2's retry thread to check the four running tasks",
    )
    # kill -9 of the 1.2.2 worker mid-task, after the task outlived both rescue periods.
    legacy.kill9()
    tasks = [first, *rest]
    wait_for(lambda: _settled(pg_autocommit, queue, tasks), 50, "every task to succeed")

    chains = _chains(pg_autocommit, queue, tasks)
    assert chains[first] == [(1, "falha_processando", 0), (2, "sucesso", 1)], chains
    for task in rest:
        assert chains[task] == [(1, "sucesso", 1)], chains
    assert len(_started(pg_autocommit, queue)) == len(tasks) + 1  # t1 twice: killed, then rescued
    assert all(worker.alive() for worker in ours)


def test_1_2_2_rescues_once_the_task_of_a_killed_worker_of_ours(fleet, pg_dsn, pg_autocommit):
    queue = fleet.queue
    pg_autocommit.execute(render("public", queue.name, upgrade=True))
    victim = fleet.ours("ours-victim")
    [task] = enqueue(pg_dsn, queue.table, [_task("v", 600)])
    wait_for(
        lambda: _started_by(pg_autocommit, queue, task, "ours-victim"), START, "ours to start v"
    )
    # A worker of ours that never rescues (1.2.2's retry thread must do it) but promotes
    # retries; its own task outlives 1.2.2's retry period.
    survivor = fleet.ours("ours-b", QUEUE_RETRY_THREAD_INTERVAL=3600)
    [other] = enqueue(pg_dsn, queue.table, [_task("w", LONG + 1)])
    wait_for(lambda: _started_by(pg_autocommit, queue, other, "ours-b"), START, "ours to start w")
    legacy = fleet.legacy("legacy")
    wait_for(lambda: _listening(pg_autocommit, queue), 20, "the 1.2.2 worker to listen")
    # Ours are busy: 1.2.2's worker claims and runs a task on the upgraded table.
    [free] = enqueue(pg_dsn, queue.table, [_task("l", 0)])
    wait_for(lambda: _settled(pg_autocommit, queue, [free]), START, "1.2.2 to run l")
    assert _started_by(pg_autocommit, queue, free, "legacy")
    victim.kill9()
    wait_for(lambda: _settled(pg_autocommit, queue, [task, other]), 40, "v rescued, w done")

    [(message,)] = pg_autocommit.execute(
        f"SELECT mensagem FROM {queue.table} WHERE id = %s", (task,)
    ).fetchall()
    assert message.startswith("Falha desconhecida de processamento"), message  # 1.2.2's words
    chains = _chains(pg_autocommit, queue, [task, other, free])
    assert chains[task] == [(1, "falha_processando", 0), (2, "sucesso", 1)], chains
    assert chains[other] == [(1, "sucesso", 1)], chains  # 1.2.2's retry left it running
    assert chains[free] == [(1, "sucesso", 1)], chains
    assert legacy.alive() and survivor.alive()


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_client_server_roll_old_fleet_out_then_ours_in_on_a_second_server(
    fleet, pg_dsn, pg_autocommit, legacy_python, tmp_path
):
    """docs/upgrading.md, client/server mode: 1.2.2's server and ours side by side on other
    ports; the 1.2.2 workers stop, then ours start (the fleets never overlap)."""
    queue = fleet.queue
    old = dict(NOTIFY_SERVICE_PORT=str(free_port()), LOCK_SERVICE_PORT=str(free_port()))
    [server_main] = VENV.glob("lib/python*/site-packages/nsj_queue_lib/server/server_main.py")
    old_server = fleet.legacy("legacy-server", server_main, CHECK_TASKS_INTERVAL="1", **old)
    wait_for(lambda: _accepts(int(old["NOTIFY_SERVICE_PORT"])), START, "1.2.2's server")
    fleet.legacy("legacy", CLIENT_SERVER_MODE="true", SERVER_HOST="127.0.0.1", **old)
    t1 = dict(origem="o", destino="d", processo="p", chave_externa="t1", payload='{"sleep": 600}')
    legacy_client(legacy_python, tmp_path, pg_dsn, queue, [t1])
    [(first,)] = pg_autocommit.execute(f"SELECT id FROM {queue.table}").fetchall()
    wait_for(lambda: _started_by(pg_autocommit, queue, first, "legacy"), START, "1.2.2 to start t1")

    # 1. db_gen --upgrade while the 1.2.2 fleet runs; 2. our server on other ports.
    with connect_pg(pg_dsn, "psycopg") as conn:
        conn.execute("SET lock_timeout = '5s'")
        conn.execute(render("public", queue.name, upgrade=True))
        conn.commit()
    server = ServerProcess(
        tmp_path / "server",
        env={**pg_env(pg_dsn), "QUEUE_NAME": queue.name, "QUEUE_TABLE": queue.table},
        token=None,
    ).start()
    try:
        [later] = enqueue(pg_dsn, queue.table, [_task("t2", 0)])  # waits: 1.2.2 is busy
        # 3. the 1.2.2 workers stop (t1 is left 'processando'); 4. ours start.
        for worker in fleet.processes.started:
            if worker.name == "legacy":
                worker.kill9()
        ours = fleet.ours(
            "ours",
            ready="retry service scheduled",
            CLIENT_SERVER_MODE="true",
            SERVER_HOST="127.0.0.1",
            NOTIFY_SERVICE_PORT=server.notify_port,
            LOCK_SERVICE_PORT=server.lock_port,
            TIMEOUT_SOCKET_MESSAGE=1,
        )
        wait_for(lambda: _settled(pg_autocommit, queue, [first, later]), 30, "t1 and t2 done")
    finally:
        server.cleanup()
    chains = _chains(pg_autocommit, queue, [first, later])
    assert chains[first] == [(1, "falha_processando", 0), (2, "sucesso", 1)], chains
    assert chains[later] == [(1, "sucesso", 1)], chains
    assert old_server.alive()  # 5. stopped last, once no 1.2.2 worker needs it
    assert "whose workers in CLIENT_SERVER_MODE lock tasks in their own server" in ours.output()


def _partition_counts(conn, queue) -> dict[str, int]:
    rows = conn.execute(
        f"SELECT tableoid::regclass::text, count(*) FROM {queue.table} GROUP BY 1"
    ).fetchall()
    return dict(rows)


def test_the_partitioned_migration_while_a_mixed_fleet_drains_runs_each_task_once(
    fleet, pg_dsn, pg_autocommit, legacy_python, tmp_path
):
    """docs/how-to/partition-a-queue.md, for real: a 1.2.2 queue with history, upgraded,
    served by a 1.2.2 worker and two of ours (bound to the plain table), moved to the
    partitioned layout while they drain; tasks enqueued before, during (1.2.2's client too)
    and after; a worker of ours started afterwards binds the partitioned table with the
    old lock key. Every task runs once, and the history stays readable."""
    queue = fleet.queue
    pg_autocommit.execute(render("public", queue.name, upgrade=True))
    history = 20_000
    pg_autocommit.execute(
        f"INSERT INTO {queue.table} (processo, status, payload, data_hora) "
        f"SELECT 'p', 'sucesso', 'h', now() - make_interval(secs => g) "
        f"FROM generate_series(1, {history}) AS g"
    )
    fleet.legacy("legacy")
    ours = [fleet.ours("ours-a", QUEUE_CONCURRENCY=3), fleet.ours("ours-b")]
    before = enqueue(pg_dsn, queue.table, [_task(f"b{n}", 0.3) for n in range(40)])
    wait_for(lambda: len(_started(pg_autocommit, queue)) >= 4, START, "the fleet to start tasks")

    with connect_pg(pg_dsn, "psycopg", autocommit=True) as conn:
        report = migration.migrate(conn, DdlNames("public", queue.name), lock_timeout_s=2)
    assert report is not None and report.swap_seconds < 5, report

    legacy_client(
        legacy_python,
        tmp_path,
        pg_dsn,
        queue,
        [dict(origem="o", destino="d", processo="p", chave_externa="l1", payload="{}")],
    )
    after = enqueue(pg_dsn, queue.table, [_task(f"a{n}", 0.1) for n in range(20)])
    late = fleet.ours("ours-late")
    everyone = [*before, *after]
    [(legacy_task,)] = pg_autocommit.execute(
        f"SELECT id FROM {queue.table} WHERE chave_externa = 'l1'"
    ).fetchall()
    everyone.append(legacy_task)
    wait_for(lambda: _settled(pg_autocommit, queue, everyone), 90, "every task to succeed")

    chains = _chains(pg_autocommit, queue, everyone)
    # Each task's effect committed once. A success that was committing at the swap fails
    # that attempt (its writes rolled back: the claim function it was in returns the old
    # table's row type) and the task runs again: said in the how-to.
    assert {task: sum(c[2] for c in chain) for task, chain in chains.items()} == dict.fromkeys(
        everyone, 1
    )
    retried = [chain for chain in chains.values() if chain != [(1, "sucesso", 1)]]
    assert all(chain == [(1, "falha", 0), (2, "sucesso", 1)] for chain in retried), retried
    assert len(retried) <= 4, retried
    messages = pg_autocommit.execute(
        f"SELECT mensagem FROM {queue.table} WHERE status = 'falha' AND id = ANY(%s)",
        (everyone,),
    ).fetchall()
    # The routine it was in returned the old row type, or was dropped by the swap under it.
    swap_errors = ("does not match function result type", "cache lookup failed for function")
    assert all(any(e in m for e in swap_errors) for (m,) in messages), messages
    where = _partition_counts(pg_autocommit, queue)
    assert where[f"{queue.name}_legacy"] >= history
    assert sum(where.values()) == history + sum(len(chain) for chain in chains.values())
    assert all(worker.alive() for worker in [*ours, late])
