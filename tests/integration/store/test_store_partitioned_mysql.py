"""The partitioned layout of a MariaDB queue table (db/mysql/layout.py,
docs/internals/storage.md): where attempts live, and retention by week.

The store conformance suite runs on this layout too (the ``mysql-partitioned`` backend);
these are the layout's own promises.
"""

from __future__ import annotations

import datetime
import threading
from types import SimpleNamespace

import pytest

from nsj_queue_lib import model
from nsj_queue_lib.db.inspection import RECENT_MARK
from nsj_queue_lib.db.mysql import retention
from nsj_queue_lib.db.mysql.layout import DAYS_AHEAD
from nsj_queue_lib.db.mysql.session import MysqlTaskSession
from nsj_queue_lib.db.task_session import ClaimPhases
from nsj_queue_lib.runtime.liveness import DatabaseLiveness
from tests.integration.store.backends import MYSQL_PARTITIONED, TASK, on

pytestmark = on(MYSQL_PARTITIONED)


def partition_of(backend, task_id: int) -> str:
    """The partition holding ``task_id``: the one whose rows include it."""
    for name in partitions(backend):
        found = backend.value(
            f"SELECT count(*) FROM {backend.table} PARTITION ({name}) WHERE id = %s", (task_id,)
        )
        if found:
            return name
    raise AssertionError(f"task {task_id} is in no partition")


def partitions(backend) -> list[str]:
    rows = backend.admin.cursor()
    rows.execute(
        "SELECT PARTITION_NAME FROM information_schema.PARTITIONS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY PARTITION_ORDINAL_POSITION",
        (backend.queue.database, backend.queue.name),
    )
    return [name for (name,) in rows.fetchall()]


def today(backend) -> int:
    return int(backend.value("SELECT UNIX_TIMESTAMP() DIV 86400"))


def monday(day: int) -> int:
    """The Monday of ``day``'s week (days since 1970-01-01): its partition's first day."""
    return day - (datetime.date(1970, 1, 1) + datetime.timedelta(days=day)).weekday()


def history(backend, worker) -> list[retention.HistoryPartition]:
    return retention.partitions(worker, backend.store.sql["retention"], backend.table)


def covered(parts: list[retention.HistoryPartition]) -> set[int]:
    return {day for p in parts for day in p.days if day >= p.first}


def split_first_partition(backend, *days: int) -> None:
    """Partitions of their own for ``days`` (in order, before the table's first history
    partition): partitions are added at the end only, so the first one is split."""
    first = history(backend, backend.admin)[0]
    into = [f"PARTITION p{day} VALUES LESS THAN ({day + 1})" for day in days]
    into.append(f"PARTITION {first.name} VALUES LESS THAN ({first.days.stop})")
    backend.execute(
        f"ALTER TABLE {backend.table} REORGANIZE PARTITION {first.name} INTO ({', '.join(into)})"
    )


def test_the_store_finds_the_layout_at_bind(backend, store):
    assert store.partitioned
    assert "finished_day = 1 AND" in store.sql["fail_final"]["sql"]
    assert partitions(backend)[0] == "p_hot"


def test_unfinished_attempts_are_hot_and_finished_ones_move_to_their_day(backend, store, worker):
    done, failed, waiting = backend.enqueue({}, {}, {})
    assert {partition_of(backend, t) for t in (done, failed, waiting)} == {"p_hot"}
    assert backend.claim(worker).id == done
    assert partition_of(backend, done) == "p_hot"  # running: still unfinished
    assert store.complete_if_running(worker, done, "ok")
    store.commit(worker)
    day = f"p{monday(today(backend))}"  # the week's partition
    assert partition_of(backend, done) == day
    task = backend.claim(worker)
    store.rollback(worker)
    store.begin(worker)
    retry = store.fail_and_retry(worker, task.id, model.FALHA, "boom", 60.0)
    store.commit(worker)
    assert partition_of(backend, failed) == day and partition_of(backend, retry) == "p_hot"
    assert partition_of(backend, waiting) == "p_hot"
    assert backend.row(done)["finished_day"] == today(backend)


def test_the_claim_procedures_completion_moves_the_row(backend, store, worker):
    first, second = backend.enqueue({}, {})
    claimed = store.claim(worker)
    assert claimed is not None and claimed.task.id == first
    following = store.complete_and_claim(worker, first, "ok", claim_next=True)
    assert following is not None and following.task.id == second
    assert partition_of(backend, first) == f"p{monday(today(backend))}"
    assert partition_of(backend, second) == "p_hot"


def test_the_claim_procedures_completion_reads_the_hot_partition_alone(backend, store, worker):
    """The procedure reads a settled task's first attempt's id (its waiting children's
    parent). Read by id alone after the settle had moved the row to its day's partition,
    MariaDB probed the primary key of every partition: with 60 days of history at each
    success (a drain at 0.74 of an empty queue's). It is read while the row is hot."""
    _history_in_every_day(backend)
    days = partitions(backend)[1:]
    [task] = backend.enqueue({})
    claimed = store.claim(worker)
    assert claimed is not None and claimed.task.id == task

    def index_reads() -> int:
        with worker.cursor() as cursor:
            cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read_key'")
            return int(cursor.fetchone()[1])

    before = index_reads()
    assert store.complete_and_claim(worker, task, "ok", claim_next=True) is None
    reads = index_reads() - before
    assert partition_of(backend, task) == f"p{monday(today(backend))}"
    assert reads < len(days), (reads, len(days))  # by id alone: a probe of every partition


def test_completions_outside_the_procedure_find_children_without_the_moved_rows(
    backend, store, worker
):
    """A commit group's end, a completion under an outside lock (the socket server's) and a
    completion with no claim after it write 'sucesso' with a statement of their own, then
    look for the tasks' children. Found
    through the attempts' rows by id alone, after the success moved them to their day's
    partition, that look probed every partition; the tasks' first ids name the edges. And
    the release procedure's last statement read every waiting task of the queue."""
    _history_in_every_day(backend)
    days = len(partitions(backend)) - 1
    parents = backend.enqueue({}, {}, {}, {})
    children = backend.enqueue(*[{"after": [parent]} for parent in parents])
    tasks = [store.claim(worker).task for _ in parents]
    [other] = backend.enqueue({})
    backend.enqueue(*[{"after": [other]} for _ in range(100)])  # waiting, not released

    def index_reads() -> int:
        with worker.cursor() as cursor:
            cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read_key'")
            return int(cursor.fetchone()[1])

    group = MysqlTaskSession(store, DatabaseLiveness(store))
    before = index_reads()
    group.settle_group(worker, SimpleNamespace(written=[(t, "ok") for t in tasks[:2]], tx=None), 0)
    group_reads = index_reads() - before
    phases = ClaimPhases(store)
    before = index_reads()
    assert phases.complete_fenced(worker, tasks[2].id, "ok", tasks[2].first_id)
    completion_reads = index_reads() - before
    before = index_reads()  # a last task's completion, nothing claimed after it
    DatabaseLiveness(store).complete_and_claim(worker, tasks[3], "ok", claim_next=False)
    last_reads = index_reads() - before
    assert {partition_of(backend, t.id) for t in tasks} == {f"p{monday(today(backend))}"}
    assert [backend.row(child)["status"] for child in children] == ["pendente"] * 4
    reads = (group_reads, completion_reads, last_reads)
    assert max(reads) < days, (reads, days)


def _history_in_every_day(backend) -> None:
    """40 more partitions (of a day each), and a finished attempt in each history
    partition."""
    end = history(backend, backend.admin)[-1].days.stop
    added = ", ".join(
        f"PARTITION p{day} VALUES LESS THAN ({day + 1})" for day in range(end, end + 40)
    )
    backend.execute(f"ALTER TABLE {backend.table} ADD PARTITION ({added})")
    days = [part.first for part in history(backend, backend.admin)]
    for task_id, day in zip(backend.enqueue(*[{} for _ in days]), days, strict=True):
        backend.execute(
            f"UPDATE {backend.table} SET status = 'sucesso', finished_day = %s WHERE id = %s",
            (day, task_id),
        )


def test_a_1_2_2_workers_update_moves_the_row_too(backend):
    """1.2.2's workers write status by id and know nothing of finished_day: the trigger
    keeps the key in step with the status, both ways."""
    task_id = backend.enqueue()
    backend.execute(f"UPDATE {backend.table} SET status = 'sucesso' WHERE id = %s", (task_id,))
    assert partition_of(backend, task_id) == f"p{monday(today(backend))}"
    backend.execute(f"UPDATE {backend.table} SET status = 'pendente' WHERE id = %s", (task_id,))
    assert partition_of(backend, task_id) == "p_hot"


def test_dedupe_keys_stay_unique_among_unfinished_tasks(backend, client, conn, store, worker):
    first = client.insert_task(**_task(), dedupe_key="d")
    conn.commit()
    assert client.insert_task(**_task(), dedupe_key="d") == first  # the holder's id
    conn.commit()
    assert backend.claim(worker).id == first
    assert store.complete_if_running(worker, first, "ok")
    store.commit(worker)
    again = client.insert_task(**_task(), dedupe_key="d")  # the holder finished: a new task
    conn.commit()
    assert again != first and backend.count("dedupe_key = 'd'") == 2


def _task() -> dict[str, str]:
    return dict(origem="o", destino="d", processo="p", chave_externa="c", payload="x")


@pytest.mark.full_days_ahead  # drops the last of db_gen's weeks ahead
def test_retention_keeps_weeks_ahead_and_drops_expired_weeks_whole(backend, store, worker):
    now = today(backend)
    old_week = monday(now - 40)
    # The first partition of a table made 40 days ago (partitions are added at the end
    # only: the oldest one is split). Its last day is 34 or more days ago.
    first = history(backend, worker)[0]
    backend.execute(
        f"ALTER TABLE {backend.table} REORGANIZE PARTITION {first.name} INTO ("
        f"PARTITION p{old_week} VALUES LESS THAN ({old_week + 7}), "
        f"PARTITION {first.name} VALUES LESS THAN ({first.days.stop}))"
    )
    payload = backend.enqueue(payload="the first attempt's payload")
    backend.execute(
        f"UPDATE {backend.table} SET status = 'falha', finished_day = %s WHERE id = %s",
        (old_week + 6, payload),  # the week's last day
    )
    retry = backend.enqueue(payload=None)
    backend.execute(
        f"UPDATE {backend.table} SET status = 'agendada', id_inicial = %s WHERE id = %s",
        (payload, retry),
    )
    last = history(backend, worker)[-1]
    backend.execute(f"ALTER TABLE {backend.table} DROP PARTITION {last.name}")  # a week missing
    backend.execute(f"ALTER TABLE {backend.table} ANALYZE PARTITION p{old_week}")

    dropped = store.purge_round(worker, 30, 1000)

    parts = history(backend, worker)
    assert f"p{old_week}" not in {p.name for p in parts} and backend.row(payload) is None
    assert set(range(now - 1, now + DAYS_AHEAD + 1)) <= covered(parts)
    for part in parts:  # Monday to Sunday, named by its Monday
        assert (part.first, part.days.stop) == (monday(part.first), part.first + 7), part
    assert dropped == 1 and not backend.in_transaction(worker)
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
    assert [(p.name, p.days) for p in history(backend, worker)] == [(p.name, p.days) for p in parts]


def test_a_week_goes_only_once_its_last_day_expired(backend, store, worker):
    """QUEUE_PURGE_MAX_AGE 30: a week whose first days are older is kept until its last
    day is: an attempt may stay up to six days longer than the age."""
    now = today(backend)
    kept, expired = monday(now - 30), monday(now - 30) - 7  # the week holding day now - 30
    first = history(backend, worker)[0]
    backend.execute(
        f"ALTER TABLE {backend.table} REORGANIZE PARTITION {first.name} INTO ("
        f"PARTITION p{expired} VALUES LESS THAN ({expired + 7}), "
        f"PARTITION p{kept} VALUES LESS THAN ({kept + 7}), "
        f"PARTITION {first.name} VALUES LESS THAN ({first.days.stop}))"
    )
    store.purge_round(worker, 30, 1000)
    names = {p.name for p in history(backend, worker)}
    assert f"p{kept}" in names and f"p{expired}" not in names


def test_an_earlier_releases_day_partitions_stay_and_weeks_follow(backend, store, worker):
    """A table made by an earlier release has a partition per day: its days are kept until
    they expire, one by one, and the purge service adds weeks after the last of them."""
    now = today(backend)
    parts = history(backend, worker)
    names = ", ".join(p.name for p in parts)
    # Two old days, then a day each to the end of the range (a reorganization keeps it)...
    end = parts[-1].days.stop
    into = ", ".join(
        f"PARTITION p{d} VALUES LESS THAN ({d + 1})"
        for d in [now - 31, now - 30, *range(now - 1, end)]
    )
    backend.execute(f"ALTER TABLE {backend.table} REORGANIZE PARTITION {names} INTO ({into})")
    # ... of which the days after now + 2 are dropped: the last partition ends with a day.
    if end > now + 3:  # (a Friday's end is Monday's: nothing beyond)
        beyond = ", ".join(f"p{d}" for d in range(now + 3, end))
        backend.execute(f"ALTER TABLE {backend.table} DROP PARTITION {beyond}")
    days = [now - 31, now - 30, *range(now - 1, now + 3)]
    done = backend.enqueue()
    backend.execute(f"UPDATE {backend.table} SET status = 'sucesso' WHERE id = %s", (done,))

    store.purge_round(worker, 30, 1000)

    parts = history(backend, worker)
    assert partition_of(backend, done) == f"p{now}"  # today's own partition
    assert [p.name for p in parts][:5] == [f"p{d}" for d in days[1:]]  # now - 31 expired
    added = parts[5:]
    assert added[0].first == now + 3 and added[0].days.stop == monday(now + 3) + 7
    assert all((p.first, p.days.stop) == (monday(p.first), p.first + 7) for p in added[1:])
    assert set(range(now - 1, now + DAYS_AHEAD + 1)) <= covered(parts)


def test_retention_gives_up_quickly_while_a_transaction_holds_the_table(backend, store, worker):
    """ADD PARTITION waits for the metadata lock of an open transaction that wrote a row:
    a short wait, tried again, then the error; the workers' statements are not held up
    for long, and the next run adds the week."""
    last = history(backend, worker)[-1]
    backend.execute(f"ALTER TABLE {backend.table} DROP PARTITION {last.name}")
    holder = backend.client_conn()
    backend.client(holder).insert_task(**_task())  # open: its metadata lock stays
    with pytest.raises(Exception, match="Lock wait timeout"):
        store.purge_round(worker, 30, 1000)
    holder.rollback()
    store.purge_round(worker, 30, 1000)
    assert last.name in {p.name for p in history(backend, worker)}
    assert int(backend.value("SELECT @@SESSION.lock_wait_timeout")) > retention.LOCK_WAIT_SECONDS


@pytest.mark.fresh_queue  # reads the table's statistics
def test_the_statistics_service_analyzes_the_hot_partition(backend, store, worker):
    # InnoDB would recalculate a small table's statistics itself, and reset the count.
    backend.execute(f"ALTER TABLE {backend.table} STATS_AUTO_RECALC = 0")
    store.analyze(worker)
    ids = backend.enqueue(*[{} for _ in range(20)])
    health = store.table_health(worker)
    assert health.may_maintain and health.changed_since_analyze >= len(ids), health
    store.analyze(worker)
    assert store.table_health(worker).changed_since_analyze == 0


def test_workers_claim_and_settle_concurrently(backend, store):
    """Several executors drain the queue; every task is settled once, in today's day."""
    ids = backend.enqueue(*[{} for _ in range(60)])
    errors: list[BaseException] = []

    def drain() -> None:
        conn = backend.worker()
        try:
            claimed = store.claim(conn)
            while claimed is not None:
                claimed = store.complete_and_claim(conn, claimed.task.id, "ok", claim_next=True)
        except BaseException as exc:  # read below
            errors.append(exc)

    threads = [threading.Thread(target=drain) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert backend.count("status = 'sucesso'") == len(ids)
    assert backend.value(f"SELECT count(*) FROM {backend.table} PARTITION (p_hot)") == 0


@pytest.mark.full_days_ahead  # a week beyond tomorrow's
def test_status_reads_the_hot_partition_and_the_days_since_the_last_fold(backend, store):
    """nsjq status (summary, the running list) and the workers' depth metric prune the day
    partitions: the unfinished attempts' reads to p_hot, the finished ones' to the days
    from two before the tally's last fold to tomorrow (not the days made ahead). Each read
    every partition's index before."""
    now = today(backend)
    old = monday(now - 10)  # a week of history, before the recent days
    first = history(backend, backend.admin)[0]
    backend.execute(
        f"ALTER TABLE {backend.table} REORGANIZE PARTITION {first.name} INTO ("
        f"PARTITION p{old} VALUES LESS THAN ({old + 7}), "
        f"PARTITION {first.name} VALUES LESS THAN ({first.days.stop}))"
    )
    conn = backend._keep(backend.driver.connect(autocommit=False))
    assert store.fold_counts(conn, 60) is not None  # folded_at: today
    conn.commit()
    inspection = backend.driver.inspection_store()
    assert inspection.tallied(backend.admin)
    recent = {f"p{monday(day)}" for day in range(now - 2, now + 2)}
    assert f"p{old}" in partitions(backend) and f"p{old}" not in recent
    ahead = f"p{monday(now + 1) + 7}"
    assert ahead in partitions(backend) and ahead not in recent  # made ahead: no attempt yet
    with backend.admin.cursor() as cur:
        summary = inspection.sql["summary_tallied"]["sql"]
        summary = summary.replace(RECENT_MARK, inspection._recent(cur))
        for name, sql, params, allowed in (
            ("summary_tallied", summary, {"recent_seconds": 60}, {"p_hot"} | recent),
            ("depth", inspection.sql["depth"]["sql"], {}, {"p_hot"}),
            ("list_running", inspection.sql["list_running"]["sql"], {"limit": 5}, {"p_hot"}),
        ):
            cur.execute(f"EXPLAIN PARTITIONS {sql}", params)
            names = [col[0] for col in cur.description]
            read = set()
            for row in cur.fetchall():
                found = dict(zip(names, row, strict=True))
                if found["table"] == "t" and found["partitions"]:
                    read.update(found["partitions"].split(","))
            assert read and read <= allowed, (name, sorted(read - allowed))
    assert inspection.summary(backend.admin) == []  # and it runs


def test_a_clients_fair_turn_reads_the_hot_partition_alone(backend):
    """An enqueue with a fair key reads its key's last turn and the ready head first; a
    client learns the layout for them, so that they read p_hot, not every day partition's
    index (2.4 ms against 0.9 at 78 partitions)."""
    conn = backend.client_conn()
    client = backend.client(conn)
    first = client.insert_task(**dict(TASK, fair_key="tenant-a"))
    second = client.insert_task(**dict(TASK, fair_key="tenant-a"))
    conn.commit()
    assert backend.row(second)["data_hora"] > backend.row(first)["data_hora"]  # its turn
    store = client._store
    assert store.partitioned
    with backend.admin.cursor() as cur:
        cur.execute(
            f"EXPLAIN PARTITIONS {store.sql['fair_turn']['sql']}",
            {"fair_key": "tenant-a", "prioridade": 0},
        )
        names = [col[0] for col in cur.description]
        read = {
            part
            for row in cur.fetchall()
            for part in (dict(zip(names, row, strict=True))["partitions"] or "").split(",")
            if part
        }
    assert read == {"p_hot"}


def test_a_worker_warns_when_the_days_ahead_have_no_partition(backend, worker, caplog):
    """The check at a worker's start reads the partitions' ranges: a week covers its days,
    and a missing last week is named day by day."""
    steps = backend.store.sql["retention"]
    now = today(backend)
    with caplog.at_level("WARNING"):
        retention.check_days_ahead(worker, steps, backend.table)
    assert "no partition for day" not in caplog.text  # today to now + 2 are in weeks
    last = history(backend, worker)[-1]
    backend.execute(f"ALTER TABLE {backend.table} DROP PARTITION {last.name}")
    missing = [d for d in range(now, now + retention.SHORT_AHEAD + 1) if d >= last.days.start]
    with caplog.at_level("WARNING"):
        retention.check_days_ahead(worker, steps, backend.table)
    assert f"no partition for day {', '.join(map(str, missing))} " in caplog.text
