"""QUEUE_ONE_WRITE on real PostgreSQL: a commit group holds its claimed rows (locked,
'pendente') and writes each task once, its outcome, with its handler's writes.

Workers run in-process (``InProcessWorker``); the crash of a worker mid-group is
``tests/acceptance/test_worker_processes.py``'s (a real process killed).
"""

from __future__ import annotations

import time

import pytest

from nsj_queue_lib.settings_checks import _one_write_problems
from tests.helpers.processes import (
    enqueue,
    fetch_rows,
    statuses,
    wait_for,
)


@pytest.fixture
def row_writes(pg_queue, pg_admin):
    """``<queue>_writes``: one row per UPDATE of a queue row (a trigger of the test's)."""
    table = f"{pg_queue.table}_writes"
    pg_admin.execute(
        f"CREATE TABLE {table} (id bigint, status text);"
        f"CREATE FUNCTION {table}_f() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$BEGIN INSERT INTO {table} VALUES (NEW.id, NEW.status); RETURN NULL; END$$;"
        f"CREATE TRIGGER {pg_queue.name}_writes AFTER UPDATE ON {pg_queue.table} "
        f"FOR EACH ROW EXECUTE FUNCTION {table}_f()"
    )
    yield table
    pg_admin.execute(f"DROP TABLE {table}; DROP FUNCTION {table}_f() CASCADE")


def test_a_held_drain_writes_each_task_once_with_its_handlers_writes(
    start_worker, pg_queue, pg_dsn, pg_autocommit, side, row_writes
):
    """Each task's handler write commits exactly once with its 'sucesso', and its row is
    written once, with that outcome; started_at and worker say when and where it ran."""

    def execute(payload, tarefa, bd_conn):
        bd_conn.execute(f"INSERT INTO {side} (task_id) VALUES (%s)", (tarefa["id"],))
        return "ok"

    count = 400
    # Groups that stay open (a group open QUEUE_BATCH_MAX_MS writes its held tasks that go
    # on 'processando': a busy machine's groups would, now and then).
    start_worker(
        execute,
        queue_concurrency=3,
        queue_batch_size=20,
        queue_one_write=True,
        queue_batch_max_ms=60000,
    )
    enqueue(pg_dsn, pg_queue.table, [dict(payload=str(i)) for i in range(count)])
    wait_for(lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": count}, 30, "the drain")
    written = pg_autocommit.execute(
        f"SELECT count(*), count(DISTINCT task_id) FROM {side}"
    ).fetchone()
    assert written == (count, count)
    rows = fetch_rows(pg_autocommit, pg_queue.table)
    assert all(r["started_at"] is not None and r["worker"] for r in rows)
    assert all(r["started_at"] <= r["finished_at"] for r in rows)
    # One write per task: its outcome (a two-write claim writes 'processando' first).
    writes = pg_autocommit.execute(
        f"SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE status <> 'sucesso') "
        f"FROM {row_writes}"
    ).fetchone()
    assert writes == (count, count, 0)
    assert pg_autocommit.execute(f"SELECT count(*) FROM {pg_queue.table}_groups").fetchone()[0] == 0


def fail_one_of_three(start_worker, pg_queue, pg_dsn, pg_autocommit, side) -> None:
    """Tasks "fail" (first), "a" and "b" in one held group, each writing its payload in
    ``side``; "fail" raises. Returns once it is recorded (falha, a retry scheduled) and the
    others succeeded, with only their writes kept."""

    def execute(payload, tarefa, bd_conn):
        bd_conn.execute(
            f"INSERT INTO {side} (task_id, chave) VALUES (%s, %s)", (tarefa["id"], payload)
        )
        if payload == "fail":
            raise RuntimeError("boom")
        return "ok"

    enqueue(
        pg_dsn,
        pg_queue.table,
        [dict(payload="fail", prioridade=90), dict(payload="a"), dict(payload="b")],
    )
    start_worker(
        execute,
        queue_concurrency=1,
        queue_batch_size=20,
        queue_one_write=True,
        queue_base_interval_retry=60,
    )
    wait_for(
        lambda: (
            statuses(pg_autocommit, pg_queue.table) == {"sucesso": 2, "falha": 1, "agendada": 1}
        ),
        15,
        "the failure to be recorded and the others to succeed",
    )
    kept = sorted(r[0] for r in pg_autocommit.execute(f"SELECT chave FROM {side}").fetchall())
    assert kept == ["a", "b"]


def test_a_failure_rolls_back_alone_and_is_counted(
    start_worker, pg_queue, pg_dsn, pg_autocommit, side
):
    """In one held group: the failing handler's write is rolled back and its failure
    recorded (falha, a retry scheduled); the others' writes and successes commit."""

    fail_one_of_three(start_worker, pg_queue, pg_dsn, pg_autocommit, side)


def test_a_keyed_task_makes_its_group_write_its_tasks(
    start_worker, pg_queue, pg_dsn, pg_autocommit, side
):
    """A lock key's task is written 'processando' by the claim (its key's running entry),
    and the held tasks of its group with it: the keyed tasks still run one at a time."""

    def execute(payload, tarefa, bd_conn):
        bd_conn.execute(
            f"INSERT INTO {side} (task_id, chave) VALUES (%s, %s)", (tarefa["id"], payload)
        )
        time.sleep(0.002)
        return "ok"

    rows = [dict(payload=f"k{i}", lock_key="k") for i in range(20)]
    rows += [dict(payload=f"p{i}") for i in range(40)]
    enqueue(pg_dsn, pg_queue.table, rows)
    start_worker(execute, queue_concurrency=3, queue_batch_size=10, queue_one_write=True)
    wait_for(lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 60}, 30, "the drain")
    keyed = fetch_rows(pg_autocommit, pg_queue.table, "lock_key = 'k'")
    spans = sorted((r["started_at"], r["finished_at"]) for r in keyed)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert pg_autocommit.execute(f"SELECT count(*) FROM {side}").fetchone()[0] == 60


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"db_driver": "MYSQL"}, "PostgreSQL only"),
        ({"client_server_mode": True}, "CLIENT_SERVER_MODE"),
        ({"queue_task_timeout": 5.0}, "QUEUE_TASK_TIMEOUT"),
        ({"queue_compat_1_2_2": "ON"}, "QUEUE_COMPAT_1_2_2"),
    ],
)
def test_one_write_refuses_what_it_cannot_carry(values, problem):
    found = _one_write_problems(dict(values, queue_one_write=True))
    assert problem in found["QUEUE_ONE_WRITE"]
    assert _one_write_problems(dict(values, queue_one_write=False)) == {}


def test_nsjq_status_and_the_depth_count_a_held_groups_tasks_as_running(
    start_worker, pg_queue, pg_dsn, pg_autocommit
):
    """While a held group runs, its tasks are 'pendente' rows; the summary nsjq status
    prints, and the depth the console's overview and /metrics read, count the ones its
    group row names as 'processando'; nsjq status lists them running, and the console
    counts them for the worker of their group."""
    import threading

    from nsj_queue_lib.db.postgres.inspection import PostgresInspectionStore

    release = threading.Event()

    def execute(payload, tarefa, bd_conn):
        release.wait(20)
        return "ok"

    enqueue(pg_dsn, pg_queue.table, [dict(payload=str(i), processo="p") for i in range(3)])
    start_worker(
        execute,
        queue_concurrency=1,
        queue_batch_size=20,
        queue_one_write=True,
        queue_batch_max_ms=60000,
    )
    store = PostgresInspectionStore(pg_queue.table)

    def counts():
        return {r["status"]: r["tasks"] for r in store.summary(pg_autocommit) if r["tasks"]}

    def depth():
        return {(r["processo"], r["status"]): r["tasks"] for r in store.depth(pg_autocommit)}

    try:
        wait_for(lambda: counts() == {"processando": 3}, 10, "the held group to run")
        assert statuses(pg_autocommit, pg_queue.table) == {"pendente": 3}  # as rows, held
        assert {k: v for k, v in depth().items() if v} == {("p", "processando"): 3}
        # nsjq status's list of running tasks, and the console's tasks per worker.
        running = store.running(pg_autocommit, 10)
        assert [(r["processo"], r["status"]) for r in running] == [("p", "pendente")] * 3
        assert [r["id"] for r in running] == sorted((r["id"] for r in running), reverse=True)
        [worker] = {r["worker"] for r in running}
        assert worker and all(r["started_at"] is not None for r in running)
        assert store.running_by_worker(pg_autocommit) == {worker: 3}
        assert len(store.running(pg_autocommit, 2)) == 2
    finally:
        release.set()
    wait_for(lambda: counts() == {"sucesso": 3}, 10, "the group to commit")
    assert depth() == {}
    assert store.running(pg_autocommit, 10) == []
    assert store.running_by_worker(pg_autocommit) == {}


def test_without_the_groups_table_the_worker_says_so_and_writes_twice(
    start_worker, pg_queue, pg_dsn, pg_autocommit, pg_admin, row_writes, caplog
):
    """A schema db_gen --upgrade has not reached: the worker logs what to run and drains
    with two writes per task (nothing held that a dead worker's group could not count)."""
    import logging

    pg_admin.execute(f"DROP TABLE {pg_queue.table}_groups")
    caplog.set_level(logging.ERROR)
    start_worker(lambda payload, tarefa, bd_conn: "ok", queue_batch_size=20, queue_one_write=True)
    enqueue(pg_dsn, pg_queue.table, [dict(payload=str(i)) for i in range(30)])
    wait_for(lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 30}, 15, "the drain")
    assert pg_autocommit.execute(f"SELECT count(*) FROM {row_writes}").fetchone()[0] == 60
    assert any("db_gen --upgrade" in r.getMessage() for r in caplog.records)


def test_a_first_handlers_failure_without_its_savepoint_is_still_counted(
    start_worker, pg_queue, pg_dsn, pg_autocommit, side, monkeypatch
):
    """Should no savepoint be set before a held group's first handler, its failure rolls the
    transaction back whole: the group's other tasks are free again (run later, once) and the
    failed task is written 'processando' on its own to record the failure."""
    from nsj_queue_lib.db.postgres.held_session import HeldTaskSession

    monkeypatch.setattr(HeldTaskSession, "holds_rows", lambda self, conn: False)

    fail_one_of_three(start_worker, pg_queue, pg_dsn, pg_autocommit, side)


def test_groups_that_close_early_run_each_task_once(
    start_worker, pg_queue, pg_dsn, pg_autocommit, side
):
    """Handlers slower than QUEUE_BATCH_MAX_MS: held groups commit what finished and give
    their unstarted tasks back unwritten (free at the commit) or write the ones they keep
    'processando' to go on; every task still runs once, with its write."""

    def execute(payload, tarefa, bd_conn):
        bd_conn.execute(f"INSERT INTO {side} (task_id) VALUES (%s)", (tarefa["id"],))
        time.sleep(0.01)
        return "ok"

    count = 60
    enqueue(pg_dsn, pg_queue.table, [dict(payload=str(i)) for i in range(count)])
    start_worker(
        execute,
        queue_concurrency=2,
        queue_batch_size=20,
        queue_one_write=True,
        queue_batch_max_ms=15,
    )
    wait_for(lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": count}, 30, "the drain")
    written = pg_autocommit.execute(
        f"SELECT count(*), count(DISTINCT task_id) FROM {side}"
    ).fetchone()
    assert written == (count, count)
    assert pg_autocommit.execute(f"SELECT count(*) FROM {pg_queue.table}_groups").fetchone()[0] == 0


@pytest.mark.parametrize("layout", ["plain", "partitioned"])
def test_what_people_see_of_held_tasks_on_both_layouts(request, layout, pg_dsn, pg_autocommit):
    """The inspection store reads held tasks from the group rows on either layout (the
    partitioned one pinned to its hot partition); a task two groups name (given back by
    the first, claimed by the second before the first's commit) counts once, for the
    latest group, and one no longer 'pendente' (settled) not at all."""
    from nsj_queue_lib.db.dialect import groups_table_name
    from nsj_queue_lib.db.postgres.inspection import PostgresInspectionStore

    queue = request.getfixturevalue("pg_queue" if layout == "plain" else "pg_partitioned_queue")
    ids = enqueue(pg_dsn, queue.table, [dict(payload=str(i), processo="p") for i in range(4)])
    groups = groups_table_name(queue.table)
    pg_autocommit.execute(
        f"INSERT INTO {groups} (id, worker, task_ids, started_at) VALUES "
        "('old', 'w0', %s, now() - interval '1 second'), ('new', 'w1', %s, now())",
        (ids[:2], ids[:3]),
    )
    pg_autocommit.execute(f"UPDATE {queue.table} SET status = 'sucesso' WHERE id = %s", (ids[2],))
    store = PostgresInspectionStore(queue.table)

    running = store.running(pg_autocommit, 10)
    assert [(r["id"], r["worker"]) for r in running] == [(ids[1], "w1"), (ids[0], "w1")]
    assert store.running_by_worker(pg_autocommit) == {"w1": 2}
    depth = {(r["processo"], r["status"]): r["tasks"] for r in store.depth(pg_autocommit)}
    assert depth == {("p", "pendente"): 1, ("p", "processando"): 2}
    summary = {r["status"]: r["tasks"] for r in store.summary(pg_autocommit) if r["tasks"]}
    assert summary == {"pendente": 1, "processando": 2, "sucesso": 1}
