"""Real worker processes (``python tests/acceptance/workers/recording_worker.py``) on real PostgreSQL.

The test worker writes one row into ``<queue>_exec`` in the task's own
transaction, so the side table counts committed executions exactly. Tests
wait on database state and process exits with deadlines.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.helpers.processes import enqueue, fetch_rows, listening_backends, statuses, wait_for
from tests.helpers.recorder import (
    WORKER,
    assert_rescued,
    drain_exactly_once,
    exec_rows,
    spec,
    started_ids,
)


def wait_listening(conn, queue, count: int) -> None:
    wait_for(
        lambda: listening_backends(conn, queue.name) == count, 15, f"{count} worker(s) to LISTEN"
    )


# -- crash recovery --------------------------------------------------------------------


@pytest.mark.slow
def test_a_task_whose_worker_is_killed_is_retried_by_another_worker(
    side, workers, env, long_task, pg_autocommit
):
    queue = side
    task, victim = long_task(env(), "victim", sleep=120, name="victim")
    victim.kill9()
    assert fetch_rows(pg_autocommit, queue.table)[0]["status"] == "processando"

    rescuer = workers.start(WORKER, env(QUEUE_RETRY_THREAD_INTERVAL=1), "rescuer")
    second = assert_rescued(pg_autocommit, queue, task, "victim", rescuer)
    assert second["status_anterior"] == "falha_processando"
    assert rescuer.alive()
    rescuer.send(signal.SIGTERM)
    assert rescuer.wait(15) == 0


# -- throughput and exactly-once ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("one_write", [False, True], ids=["two-writes", "one-write"])
def test_four_workers_run_two_thousand_tasks_exactly_once(
    side, workers, env, pg_dsn, pg_autocommit, one_write
):
    queue = side
    held = {"QUEUE_ONE_WRITE": "true", "QUEUE_BATCH_SIZE": "20"} if one_write else {}
    procs = [
        workers.start(WORKER, env(QUEUE_CONCURRENCY=4, **held), f"worker{i}") for i in range(4)
    ]
    wait_listening(pg_autocommit, queue, 4)
    pids = drain_exactly_once(pg_dsn, pg_autocommit, queue, 4, 500, 60)
    assert (
        pg_autocommit.execute(
            f"SELECT count(*) FROM {queue.table} q JOIN {queue.table}_exec e ON e.task_id = q.id"
        ).fetchone()[0]
        == 2000
    )
    assert set(pids) <= {p.pid for p in procs}
    assert len(set(pids)) == 4, "every process should have taken part"
    # No liveness lock outlives its task.
    assert (
        pg_autocommit.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND a.application_name = %s",
            (f"nsj_queue_lib:{queue.name}",),
        ).fetchone()[0]
        == 0
    )
    if one_write:  # every held group's row went with its commit
        groups = f"{queue.table}_groups"
        assert pg_autocommit.execute(f"SELECT count(*) FROM {groups}").fetchone()[0] == 0
    for proc in procs:
        proc.send(signal.SIGTERM)
    assert [proc.wait(15) for proc in procs] == [0, 0, 0, 0]
    if one_write:  # the groups held their tasks: they wrote rows (reported at the exit)
        name = queue.table.split(".")[-1] + "_groups"
        inserted = "SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE relname = %s"
        wait_for(
            lambda: pg_autocommit.execute(inserted, (name,)).fetchone()[0] > 0,
            10,
            "the held groups' rows in the statistics",
        )


# -- stopping ------------------------------------------------------------------------------


@pytest.mark.slow
def test_halt_stops_every_worker_of_the_queue(side, workers, env, pg_dsn, pg_autocommit, pg_admin):
    queue = side
    procs = [workers.start(WORKER, env(QUEUE_CONCURRENCY=c)) for c in (1, 2)]
    # QUEUE_NAME in upper case: its channel is the folded name an unquoted NOTIFY uses.
    procs.append(workers.start(WORKER, env(QUEUE_CONCURRENCY=4, QUEUE_NAME=queue.name.upper())))
    wait_listening(pg_autocommit, queue, 3)
    [busy] = enqueue(pg_dsn, queue.table, [dict(payload=spec(sleep=1, started=True))])
    wait_for(lambda: started_ids(pg_autocommit, queue) == [busy], 10, "a worker to start the task")

    pg_admin.execute(f"NOTIFY {queue.name.upper()}, 'HALT'")  # as an operator types it
    sent = time.monotonic()
    codes = [proc.wait(15) for proc in procs]
    assert time.monotonic() - sent < 15
    assert codes == [0, 0, 0]
    # The task in flight finished before its worker exited.
    assert statuses(pg_autocommit, queue.table) == {"sucesso": 1}
    assert len(exec_rows(pg_autocommit, queue)) == 1


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_lets_the_running_task_finish_and_claims_nothing_more(
    signum, side, workers, env, pg_dsn, pg_autocommit
):
    queue = side
    [running, waiting] = enqueue(
        pg_dsn,
        queue.table,
        [
            dict(payload=spec(sleep=1.5, started=True), chave_externa="running"),
            dict(payload="x", chave_externa="waiting", prioridade=1),
        ],
    )
    worker = workers.start(WORKER, env(QUEUE_CONCURRENCY=1, QUEUE_GRACE_PERIOD=20))
    wait_for(
        lambda: started_ids(pg_autocommit, queue) == [running], 10, "the worker to start the task"
    )
    worker.send(signum)
    assert worker.wait(15) == 0
    rows = {r["id"]: r["status"] for r in fetch_rows(pg_autocommit, queue.table)}
    assert rows == {running: "sucesso", waiting: "pendente"}
    assert [r[0] for r in exec_rows(pg_autocommit, queue)] == [running]


@pytest.mark.slow
def test_a_task_longer_than_the_grace_period_is_released_for_a_retry(
    side, workers, env, pg_dsn, pg_autocommit
):
    queue = side
    [task] = enqueue(
        pg_dsn, queue.table, [dict(payload=spec(sleep=120, sleep_on=[1], started=True))]
    )
    worker = workers.start(WORKER, env(QUEUE_GRACE_PERIOD=1))
    wait_for(
        lambda: started_ids(pg_autocommit, queue) == [task], 10, "the worker to start the task"
    )
    worker.send(signal.SIGTERM)
    sent = time.monotonic()
    assert worker.wait(10) == 0
    assert (
        time.monotonic() - sent < 6
    )  # the grace period (1 s) and the release, not the task (120 s)

    first, retry = fetch_rows(pg_autocommit, queue.table)
    assert (first["id"], first["status"], first["reenfileirado"]) == (
        task,
        "falha_processando",
        True,
    )
    assert (retry["tentativa"], retry["id_anterior"]) == (2, task)
    assert retry["status"] in ("agendada", "pendente")
    assert exec_rows(pg_autocommit, queue) == []  # the interrupted attempt's write was rolled back

    # The released attempt is picked up by the next worker.
    again = workers.start(WORKER, env())
    wait_for(
        lambda: statuses(pg_autocommit, queue.table) == {"falha_processando": 1, "sucesso": 1},
        10,
        "the next attempt to succeed",
    )
    again.send(signal.SIGTERM)
    assert again.wait(15) == 0


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, variable",
    [
        (dict(QUEUE_CONCURRENCY="0"), "QUEUE_CONCURRENCY"),
        (dict(QUEUE_TABLE=None), "QUEUE_TABLE"),
        (dict(QUEUE_BASE_INTERVAL_RETRY="five"), "QUEUE_BASE_INTERVAL_RETRY"),
        (dict(QUEUE_NAME="bad name;"), "QUEUE_NAME"),
    ],
    ids=["concurrency-0", "no-queue-table", "bad-interval", "bad-queue-name"],
)
def test_a_bad_environment_exits_non_zero_naming_the_variable_and_claims_nothing(
    overrides, variable, side, workers, env, pg_dsn, pg_autocommit
):
    queue = side
    enqueue(pg_dsn, queue.table, [dict(payload="x")])
    worker = workers.start(WORKER, env(**overrides))
    started = time.monotonic()
    code = worker.wait(10)
    assert code != 0
    assert time.monotonic() - started < 10
    assert variable in worker.last_line(), worker.output()
    assert statuses(pg_autocommit, queue.table) == {"pendente": 1}
    assert exec_rows(pg_autocommit, queue) == []


@pytest.mark.slow
def test_a_held_task_whose_worker_is_killed_is_counted_and_retried(
    side, workers, env, long_task, pg_autocommit
):
    """QUEUE_ONE_WRITE: the killed worker's group rolled back, its task 'pendente' again
    and free, but its ledger row names it: the retry service's first step writes it
    'processando' (db/postgres/held_groups.py), and its rescue counts the attempt."""
    import types

    from nsj_queue_lib.db.postgres.held_groups import AbandonedGroups

    queue = side
    held = env(QUEUE_ONE_WRITE="true", QUEUE_BATCH_SIZE="20")
    task, victim = long_task(held, "victim", sleep=120, name="victim")
    groups = f"{queue.table}_groups"
    assert pg_autocommit.execute(f"SELECT task_ids FROM {groups}").fetchall() == [([task],)]
    victim.kill9()
    wait_for(
        lambda: fetch_rows(pg_autocommit, queue.table)[0]["status"] == "pendente",
        10,
        "the killed worker's transaction to end",
    )
    store = types.SimpleNamespace(queue_table=queue.table, partitioned=False)
    with pg_autocommit.transaction():
        assert AbandonedGroups(store)(pg_autocommit) == 1
    assert fetch_rows(pg_autocommit, queue.table)[0]["status"] == "processando"
    assert pg_autocommit.execute(f"SELECT count(*) FROM {groups}").fetchone()[0] == 0

    rescuer = workers.start(WORKER, env(QUEUE_RETRY_THREAD_INTERVAL=1), "rescuer")
    second = assert_rescued(pg_autocommit, queue, task, "victim", rescuer)
    assert second["status_anterior"] == "falha_processando"
    rescuer.send(signal.SIGTERM)
    assert rescuer.wait(15) == 0
