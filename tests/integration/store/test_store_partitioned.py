"""The partitioned layout of a PostgreSQL queue table (db/postgres/layout.py,
docs/internals/storage.md): where attempts live, and retention by day.

The store conformance suite runs on this layout too (the ``partitioned`` backend);
these are the layout's own promises.
"""

from __future__ import annotations

import re

import pytest

from nsj_queue_lib import model
from nsj_queue_lib.db.inspection import RECENT_MARK
from nsj_queue_lib.db.postgres import retention
from nsj_queue_lib.db.postgres.layout import DAYS_AHEAD
from tests.integration.store.backends import PARTITIONED, on

pytestmark = on(PARTITIONED)


def partition_of(backend, task_id: int) -> str:
    """The partition holding ``task_id`` (its name as the search path shows it)."""
    return backend.value(
        f"SELECT tableoid::regclass::text FROM {backend.table} WHERE id = %s", (task_id,)
    )


def today(backend) -> int:
    return backend.value(retention.TODAY)


def test_unfinished_attempts_are_hot_and_finished_ones_move_to_their_day(backend, store, worker):
    done, failed, waiting = backend.enqueue({}, {}, {})
    hot = f"{backend.queue.name}_hot"
    assert {partition_of(backend, t) for t in (done, failed, waiting)} == {hot}
    assert backend.claim(worker).id == done
    assert partition_of(backend, done) == hot  # running: still unfinished
    assert store.complete_if_running(worker, done, "ok")
    store.commit(worker)
    day = f"{backend.queue.name}_p{today(backend)}"
    assert partition_of(backend, done) == day
    task = backend.claim(worker)
    store.rollback(worker)
    store.begin(worker)
    retry = store.fail_and_retry(worker, task.id, model.FALHA, "boom", 60.0)
    store.commit(worker)
    assert partition_of(backend, failed) == day and partition_of(backend, retry) == hot
    assert partition_of(backend, waiting) == hot


def test_a_1_2_2_workers_update_moves_the_row_too(backend):
    """1.2.2's workers write status by id and know nothing of finished_day: the trigger
    keeps the key in step with the status, both ways."""
    task_id = backend.enqueue()
    backend.execute(f"UPDATE {backend.table} SET status = 'sucesso' WHERE id = %s", (task_id,))
    assert partition_of(backend, task_id) == f"{backend.queue.name}_p{today(backend)}"
    backend.execute(f"UPDATE {backend.table} SET status = 'pendente' WHERE id = %s", (task_id,))
    assert partition_of(backend, task_id) == f"{backend.queue.name}_hot"


def test_bi_reads_of_the_queue_name_see_every_attempt(backend, store, worker):
    ids = backend.enqueue({}, {})
    assert backend.claim(worker).id == ids[0]
    assert store.complete_if_running(worker, ids[0], "ok")
    store.commit(worker)
    rows = backend.rows()  # SELECT * FROM <name> ORDER BY id
    assert [(r["id"], r["status"]) for r in rows] == [(ids[0], "sucesso"), (ids[1], "pendente")]
    counts = backend.value(
        f"SELECT count(*) FILTER (WHERE status = 'sucesso') * 10 + count(*) FROM {backend.table}"
    )
    assert counts == 12


@pytest.mark.full_days_ahead  # drops the last of db_gen's days ahead
def test_retention_keeps_days_ahead_and_drops_expired_days_whole(backend, store, worker):
    now = today(backend)
    old_day = now - 40
    backend.execute(
        f"CREATE TABLE {backend.table}_p{old_day} PARTITION OF {backend.table} "
        f"FOR VALUES FROM ({old_day}) TO ({old_day + 1})"
    )
    first = backend.enqueue(payload="the first attempt's payload")
    backend.execute(
        f"UPDATE {backend.table} SET status = 'falha', finished_day = %s WHERE id = %s",
        (old_day, first),
    )
    retry = backend.enqueue(payload=None)
    backend.execute(
        f"UPDATE {backend.table} SET status = 'agendada', id_inicial = %s WHERE id = %s",
        (first, retry),
    )
    backend.execute(f"DROP TABLE {backend.table}_p{now + DAYS_AHEAD}")  # a day missing ahead
    backend.execute(f"ANALYZE {backend.table}_p{old_day}")  # its row count, as estimated

    dropped = store.purge_round(worker, 30, 1000)

    days = retention.days(worker, backend.table)
    assert old_day not in days and backend.row(first) is None
    assert set(range(now - 1, now + DAYS_AHEAD + 1)) <= set(days)
    assert dropped == 1 and not backend.in_transaction(worker)
    # The days turned without an ANALYZE of the whole table, which analyzes every
    # partition again (retention.py says why): the kept day's statistics are its own.
    kept = backend.value(
        "SELECT analyze_count FROM pg_stat_user_tables "
        f"WHERE relid = '{backend.table}_p{now - 1}'::regclass"
    )
    assert kept == 0
    # The waiting retry kept the payload its first attempt took away.
    assert backend.row(retry)["payload"] == "the first attempt's payload"
    # And its own retry keeps it: the first attempt is gone for good.
    backend.execute(f"UPDATE {backend.table} SET status = 'pendente' WHERE id = %s", (retry,))
    task = backend.claim(worker)
    assert (task.id, task.payload) == (retry, "the first attempt's payload")
    store.rollback(worker)
    store.begin(worker)
    third = store.fail_and_retry(worker, retry, model.FALHA, "boom", 0.0)
    store.commit(worker)
    assert backend.row(third)["payload"] == "the first attempt's payload"
    # Within QUEUE_PURGE_MAX_AGE nothing goes: the next run drops nothing.
    assert store.purge_round(worker, 30, 1000) == 0
    assert set(retention.days(worker, backend.table)) == set(days)


@pytest.mark.fresh_queue  # counts dead rows and vacuums
def test_the_vacuum_service_looks_at_the_hot_partition(backend, store, worker):
    """The hot partition's dead versions are what the vacuum service counts and removes (a
    partitioned table has no rows, hence no statistics, of its own)."""
    ids = backend.enqueue(*[{} for _ in range(20)])
    backend.execute(
        f"UPDATE {backend.table} SET status = 'agendada' WHERE id = ANY(%s)", (list(ids),)
    )
    backend.execute("SELECT pg_stat_force_next_flush()")  # the counts reach the statistics
    backend.execute("SELECT 1")
    health = store.table_health(worker)
    assert health is not None and health.may_maintain and health.dead_rows >= 20, health
    store.vacuum(backend.admin)  # autocommit: VACUUM runs outside a transaction
    backend.execute("SELECT pg_stat_force_next_flush()")
    backend.execute("SELECT 1")
    vacuumed = backend.value(
        "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = %s::regclass",
        (f"{backend.table}_hot",),
    )
    assert vacuumed == 1


def test_status_plans_the_hot_partition_and_the_days_since_the_last_fold(backend, store, worker):
    """nsjq status's summary reads the unfinished attempts in the hot partition and the
    finished ones in the days from two before the tally's last fold to tomorrow: the
    planner leaves the older days and the days made ahead out. Planning every partition
    made a new session's summary 21 ms instead of 5 with 14 days ahead."""
    now = today(backend)
    old_day = now - 10
    backend.execute(
        f"CREATE TABLE {backend.table}_p{old_day} PARTITION OF {backend.table} "
        f"FOR VALUES FROM ({old_day}) TO ({old_day + 1})"
    )
    assert store.fold_counts(worker, 60) is not None  # folded_at: now
    store.commit(worker)
    inspection = backend.driver.inspection_store()
    assert inspection.tallied(backend.admin)
    name = backend.queue.name
    with backend.admin.cursor() as cur:
        summary = inspection.sql["summary_tallied"].replace(RECENT_MARK, inspection._recent(cur))
        cur.execute(f"EXPLAIN {summary}", {"recent_seconds": 60})
        plan = "\n".join(row[0] for row in cur.fetchall())
    read = set(re.findall(rf"\b({name}_(?:hot|p\d+))\b", plan))
    allowed = {f"{name}_hot"} | {f"{name}_p{day}" for day in range(now - 2, now + 2)}
    assert f"{name}_hot" in read and read <= allowed, sorted(read - allowed)
    assert inspection.summary(backend.admin) == []  # and it runs
