"""The maintenance services (retry, renotify, purge) and the lock key spaces, on real PostgreSQL.

Services are built directly and driven with ``run_once()``; rows are inserted
with SQL to set up exactly the state a service must handle. A task's liveness
lock is the two-int4 advisory lock (queue table oid as signed int4, id % 2^31),
computed here independently of the library.
"""

from __future__ import annotations

import datetime
import threading

import psycopg
import pytest

from nsj_queue_lib import Task, WorkerBase
from nsj_queue_lib.runtime.purge import PurgeService
from nsj_queue_lib.runtime.renotify import RenotifyService
from nsj_queue_lib.runtime.retry import RetryService
from nsj_queue_lib.runtime.service import service_lock_key
from nsj_queue_lib.runtime.tally import TallyService
from nsj_queue_lib.runtime.vacuum import VacuumService
from tests.helpers import services
from tests.helpers.databases import collect_until_sentinel
from tests.helpers.legacy import LEGACY_KEYS
from tests.helpers.processes import (
    enqueue,
    fetch_rows,
    settings_for,
    start_function_worker,
    statuses,
    wait_for,
)


def make_service(cls, dsn: str, table: str, **changes):
    return services.make_service(cls, settings_for(dsn, table, **changes))


def liveness_keys(conn, table: str, task_id: int) -> tuple[int, int]:
    oid = conn.execute("SELECT %s::regclass::oid::bigint", (table,)).fetchone()[0]
    signed = oid - 2**32 if oid >= 2**31 else oid
    return signed, task_id % 2**31


def insert_row(conn, table: str, status: str, task_id: int | None = None, **columns) -> int:
    values = {
        "origem": "teste",
        "destino": "worker",
        "processo": "processar",
        "payload": "p",
        "status": status,
        **columns,
    }
    if task_id is not None:
        values["id"] = task_id
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    return conn.execute(
        f"INSERT INTO {table} ({names}) VALUES ({marks}) RETURNING id", list(values.values())
    ).fetchone()[0]


@pytest.fixture
def holder(pg_dsn, pg_queue):
    """A separate session holding advisory locks (as a live worker would)."""
    conn = psycopg.connect(pg_dsn, autocommit=True)
    yield conn
    conn.close()


# -- retry service ------------------------------------------------------------------------


@pytest.mark.parametrize("big_ids", [False, True], ids=["small-ids", "ids-above-2^31"])
def test_retry_service_rescues_only_attempts_without_a_liveness_lock(
    big_ids, pg_queue, pg_dsn, pg_autocommit, holder
):
    table = pg_queue.table
    base = 2**31 + 5 if big_ids else None
    orphan = insert_row(pg_autocommit, table, "processando", base, chave_externa="orphan")
    alive = insert_row(
        pg_autocommit,
        table,
        "processando",
        None if base is None else base + 1,
        chave_externa="alive",
    )
    keys = liveness_keys(holder, table, alive)
    # Held outside any transaction: a lock left behind on a pooler's server connection.
    holder.execute("SELECT pg_advisory_lock(%s, %s)", keys)
    service = make_service(RetryService, pg_dsn, table, queue_base_interval_retry=10)
    with service._connect() as conn:
        service.store.bind(conn)
        found = service.store.find_orphans(conn, 10, check_session_locks=True)
    assert sorted(t.id for t in found) == sorted([orphan, alive])
    # Held inside an open transaction, as a live executor holds it.
    holder.execute("BEGIN")

    assert service.run_once() == 1

    rows = {r["id"]: r for r in fetch_rows(pg_autocommit, table)}
    assert rows[orphan]["status"] == "falha_processando"
    assert rows[orphan]["reenfileirado"] is True
    assert rows[orphan]["mensagem"]
    [retry] = [r for r in rows.values() if r["id_anterior"] == orphan]
    assert (retry["tentativa"], retry["id_inicial"], retry["status_anterior"]) == (
        2,
        orphan,
        "falha_processando",
    )
    assert retry["status"] in ("agendada", "pendente")
    assert rows[orphan]["proxima_tentativa"] == retry["data_hora"]
    # Due at once, not after the 10-minute back-off: the worker failed, not the handler.
    assert retry["data_hora"] - rows[orphan]["data_hora"] < datetime.timedelta(minutes=1)
    # The attempt whose worker is alive is not touched.
    assert rows[alive]["status"] == "processando"
    assert not [r for r in rows.values() if r["id_anterior"] == alive]

    # Once its worker is gone, it is rescued too.
    holder.execute("SELECT pg_advisory_unlock_all()")
    holder.execute("COMMIT")
    assert service.run_once() == 1
    [after] = fetch_rows(pg_autocommit, table, "id = %s", (alive,))
    assert after["status"] == "falha_processando"


def test_retry_service_runs_on_one_worker_at_a_time(pg_queue, pg_dsn, pg_autocommit, holder):
    orphan = insert_row(pg_autocommit, pg_queue.table, "processando")
    service = make_service(RetryService, pg_dsn, pg_queue.table)
    holder.execute("SELECT pg_advisory_lock(%s)", (service.lock.key,))  # another worker runs it
    assert service.run_once() is None
    assert (
        fetch_rows(pg_autocommit, pg_queue.table, "id = %s", (orphan,))[0]["status"]
        == "processando"
    )
    holder.execute("SELECT pg_advisory_unlock(%s)", (service.lock.key,))
    assert service.run_once() == 1


def test_retry_service_dead_letters_an_orphan_on_its_last_attempt(pg_queue, pg_dsn, pg_autocommit):
    first = insert_row(pg_autocommit, pg_queue.table, "falha", payload="original")
    last = insert_row(
        pg_autocommit,
        pg_queue.table,
        "processando",
        payload=None,
        tentativa=2,
        id_inicial=first,
        id_anterior=first,
    )
    service = make_service(RetryService, pg_dsn, pg_queue.table, queue_max_retry=2)
    assert service.run_once() == 1
    rows = {r["id"]: r for r in fetch_rows(pg_autocommit, pg_queue.table)}
    assert rows[last]["status"] == "falha_processando" and rows[last]["estouro_tentativas"] is True
    [dead] = [r for r in rows.values() if r["dead"]]
    assert (dead["live_id"], dead["status"], dead["payload"]) == (first, "pendente", "original")


def test_retry_service_applies_each_processos_retry_policy(pg_queue, pg_dsn, pg_autocommit):
    class Worker(WorkerBase):
        @Task("uma_vez", max_retry=1)
        def once(self, payload, tarefa, bd_conn):
            return "never runs here"

    once = insert_row(pg_autocommit, pg_queue.table, "processando", processo="uma_vez")
    other = insert_row(pg_autocommit, pg_queue.table, "processando")
    settings = settings_for(pg_dsn, pg_queue.table, queue_max_retry=5)
    service = services.make_service(
        RetryService, settings, policies=Worker.retry_policies(settings)
    )
    assert service.run_once() == 2
    rows = {r["id"]: r for r in fetch_rows(pg_autocommit, pg_queue.table)}
    # uma_vez has one attempt: its rescued orphan goes to the dead letter at once.
    assert rows[once]["estouro_tentativas"] is True and rows[once]["proxima_tentativa"] is None
    assert [r["live_id"] for r in rows.values() if r["dead"]] == [once]
    # The other processo keeps the queue's five attempts: retried.
    assert rows[other]["reenfileirado"] is True and rows[other]["estouro_tentativas"] is False


# -- renotify service ----------------------------------------------------------------------


def test_renotify_promotes_due_retries_and_wakes_the_workers(
    pg_queue, pg_dsn, pg_autocommit, pg_admin
):
    table = pg_queue.table
    due = insert_row(pg_autocommit, table, "agendada")
    later = insert_row(pg_autocommit, table, "agendada")
    pg_autocommit.execute(
        f"UPDATE {table} SET data_hora = clock_timestamp() - interval '1 second' WHERE id = %s",
        (due,),
    )
    pg_autocommit.execute(
        f"UPDATE {table} SET data_hora = clock_timestamp() + interval '1 hour' WHERE id = %s",
        (later,),
    )
    service = make_service(RenotifyService, pg_dsn, table)
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{pg_queue.name}"')
        assert service.run_once() == 1
        assert collect_until_sentinel(listener, pg_admin, pg_queue.name) == [""]
    rows = {r["id"]: r["status"] for r in fetch_rows(pg_autocommit, table)}
    assert rows == {due: "pendente", later: "agendada"}


def test_renotify_wakes_the_workers_for_tasks_left_waiting(
    pg_queue, pg_dsn, pg_autocommit, pg_admin
):
    """A 'pendente' task older than QUEUE_WAIT_NOTIFY_INTERVAL: its notification was lost."""
    table = pg_queue.table
    service = make_service(RenotifyService, pg_dsn, table, queue_wait_notify_interval=5)
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{pg_queue.name}"')
        fresh = insert_row(pg_autocommit, table, "pendente")
        collect_until_sentinel(listener, pg_admin, pg_queue.name)  # the insert's own notification
        assert service.run_once() == 0
        assert (
            collect_until_sentinel(listener, pg_admin, pg_queue.name) == []
        )  # not waiting long enough
        pg_autocommit.execute(
            f"UPDATE {table} SET data_hora = clock_timestamp() - interval '1 minute' WHERE id = %s",
            (fresh,),
        )
        assert service.run_once() == 0
        assert collect_until_sentinel(listener, pg_admin, pg_queue.name) == [""]


# -- purge service ------------------------------------------------------------------------


def test_purge_deletes_old_settled_rows_in_bounded_rounds(pg_queue, pg_dsn, pg_autocommit):
    table = pg_queue.table
    old = "clock_timestamp() - interval '2 days'"

    def row(status, **columns):
        task_id = insert_row(pg_autocommit, table, status, **columns)
        pg_autocommit.execute(f"UPDATE {table} SET data_hora = {old} WHERE id = %s", (task_id,))
        return task_id

    gone = {row("sucesso"), row("sucesso"), row("falha", estouro_tentativas=True)}
    finished = row("falha_processando")
    gone |= {finished, row("sucesso", id_inicial=finished, tentativa=2)}
    gone.add(row("sucesso", dead=True, live_id=finished))
    # A chain still in progress: its first and middle attempts stay (later attempts
    # read the payload of the first), and so does the pending one.
    first = row("falha")
    kept = {
        first,
        row("falha", id_inicial=first, tentativa=2),
        row("agendada", id_inicial=first, tentativa=3),
    }
    kept |= {row("pendente"), row("agendada"), row("processando")}
    kept.add(insert_row(pg_autocommit, table, "sucesso"))  # recent

    service = make_service(PurgeService, pg_dsn, table, queue_purge_max_age=1, queue_purge_limit=2)
    rounds = []
    purge_round = service.store.purge_round

    def spy(conn, max_age_days, limit, sides=None):
        # Every round is a transaction of its own: nothing is left open from the last one.
        assert conn.info.transaction_status.name == "IDLE"
        count = purge_round(conn, max_age_days, limit, sides=sides)
        rounds.append(count)
        return count

    service.store.purge_round = spy
    assert service.run_once() == len(gone)
    assert {r["id"] for r in fetch_rows(pg_autocommit, table)} == kept
    assert max(rounds) == 2 and sum(rounds) == len(gone) and len(rounds) >= 3
    assert service.run_once() == 0


# -- vacuum service -------------------------------------------------------------------------


def table_stat(conn, table: str, column: str) -> int:
    """One of the table's counters in pg_stat_user_tables (0 before it has any)."""
    sql = f"SELECT {column} FROM pg_stat_user_tables WHERE relid = to_regclass(%s)"
    row = conn.execute(sql, (table,)).fetchone()
    return 0 if row is None else int(row[0])


def test_vacuum_service_analyzes_a_table_that_only_grew(pg_queue, pg_dsn, pg_autocommit):
    table = pg_queue.table
    pg_autocommit.execute(
        f"INSERT INTO {table} (origem, destino, processo, payload) "
        "SELECT 'teste', 'worker', 'processar', 'p' FROM generate_series(1, 300)"
    )
    pg_autocommit.execute("SELECT pg_stat_force_next_flush()")
    wait_for(
        lambda: table_stat(pg_autocommit, table, "n_mod_since_analyze") >= 300,
        10,
        "the statistics to count them",
    )
    service = make_service(VacuumService, pg_dsn, table, queue_vacuum_dead_rows=200)
    assert service.run_once() == 0  # no dead version: nothing vacuumed
    assert (
        table_stat(pg_autocommit, table, "vacuum_count"),
        table_stat(pg_autocommit, table, "analyze_count"),
    ) == (0, 1)


def test_vacuum_service_vacuums_the_queue_table_past_its_dead_rows(pg_queue, pg_dsn, pg_autocommit):
    table = pg_queue.table
    pg_autocommit.execute(
        f"INSERT INTO {table} (origem, destino, processo, payload, status) "
        "SELECT 'teste', 'worker', 'processar', 'p', 'sucesso' FROM generate_series(1, 300)"
    )
    pg_autocommit.execute(f"UPDATE {table} SET mensagem = 'settled again'")  # 300 dead versions
    pg_autocommit.execute("SELECT pg_stat_force_next_flush()")
    wait_for(
        lambda: table_stat(pg_autocommit, table, "n_dead_tup") >= 300,
        10,
        "the statistics to count them",
    )

    service = make_service(VacuumService, pg_dsn, table, queue_vacuum_dead_rows=1000)
    assert service.run_once() == 0  # below its threshold: nothing done
    assert table_stat(pg_autocommit, table, "vacuum_count") == 0
    service = make_service(VacuumService, pg_dsn, table, queue_vacuum_dead_rows=200)
    assert service.run_once() >= 300
    assert table_stat(pg_autocommit, table, "vacuum_count") == 1
    # (Whether the dead versions are gone depends on the other sessions' snapshots: with
    # parallel tests, one of them may still see them, and VACUUM keeps them for it.)


# -- lock key spaces -------------------------------------------------------------------------


ADVISORY_LOCKS = """
SELECT l.classid::bigint, l.objid::bigint, l.objsubid
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = %s
"""


@LEGACY_KEYS  # holds the bigint keys 1-3, as 1.2.2 does
def test_service_locks_and_task_locks_never_collide(pg_queue, pg_dsn, pg_autocommit, holder):
    table = pg_queue.table
    # The original took its maintenance locks on bigint keys 1-3: a task with id 1
    # must still get its liveness lock while those are held.
    holder.execute("SELECT pg_advisory_lock(1), pg_advisory_lock(2), pg_advisory_lock(3)")
    started, release = threading.Event(), threading.Event()

    def execute(payload, tarefa, bd_conn):
        started.set()
        release.wait(20)
        return "done"

    worker = start_function_worker(pg_dsn, pg_queue, pg_autocommit, execute)
    try:
        [task_id] = enqueue(pg_dsn, table, [dict(payload="x")])
        assert task_id == 1
        assert started.wait(10)
        app = f"nsj_queue_lib:{pg_queue.name}"
        task_lock = (*[k % 2**32 for k in liveness_keys(pg_autocommit, table, task_id)], 2)
        assert pg_autocommit.execute(ADVISORY_LOCKS, (app,)).fetchall() == [task_lock]

        service = make_service(RetryService, pg_dsn, table)
        during = []
        find_orphans = service.store.find_orphans

        def spy(conn, limit, check_session_locks):
            during.extend(pg_autocommit.execute(ADVISORY_LOCKS, (app,)).fetchall())
            return find_orphans(conn, limit, check_session_locks)

        service.store.find_orphans = spy
        assert service.run_once() == 0  # the running task is alive: nothing to rescue
        key = service.lock.key % 2**64
        service_lock = (key >> 32, key & 0xFFFFFFFF, 1)  # a bigint key: objsubid 1
        assert sorted(during) == sorted([task_lock, service_lock])
        assert fetch_rows(pg_autocommit, table, "id = %s", (task_id,))[0]["status"] == "processando"
    finally:
        release.set()
    wait_for(lambda: statuses(pg_autocommit, table) == {"sucesso": 1}, 10, "the task to finish")
    assert worker.stop() == 0


def test_service_lock_keys_differ_per_service_and_queue():
    keys = {
        service_lock_key(table, name)
        for table in ("public.a", "public.b", "other.a")
        for name in ("retry", "renotify", "purge")
    }
    assert len(keys) == 9
    assert all(-(2**63) <= key < 2**63 for key in keys)


def test_tally_service_folds_a_history_a_chunk_at_a_time(
    pg_queue, pg_dsn, pg_autocommit, monkeypatch
):
    """A table's first runs: the whole history in chunks, one commit each, in one run."""
    from nsj_queue_lib.db import tally

    monkeypatch.setattr(tally, "FOLD_CHUNK", 100)
    table = pg_queue.table
    pg_autocommit.execute(
        f"INSERT INTO {table} (processo, status, payload) "
        "SELECT 'processar', 'sucesso', 'p' FROM generate_series(1, 450)"
    )
    service = make_service(TallyService, pg_dsn, table)
    assert service.run_once() == 0  # the first run notes the highest id
    assert service.run_once() == 450
    assert pg_autocommit.execute(f"SELECT sum(tasks) FROM {table}_tally").fetchone() == (450,)
    assert service.run_once() == 0
