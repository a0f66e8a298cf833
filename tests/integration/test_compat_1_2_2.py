"""Compatibility with nsj-queue-lib 1.2.2 workers (QUEUE_COMPAT_1_2_2), on real PostgreSQL.

A 1.2.2 worker runs a task while its session holds ``pg_advisory_lock(id)``
(one bigint), and its retry thread rescues a 'processando' row whose key it
can take. Here a plain session plays the 1.2.2 side with those same calls.
The fleets of both libraries, for real, are in
tests/acceptance/test_mixed_fleet_1_2_2.py.
"""

from __future__ import annotations

import secrets

import psycopg
import pytest

from nsj_queue_lib.db.driver import make_driver
from nsj_queue_lib.db.postgres.legacy_keys import PostgresLegacyKeys
from nsj_queue_lib.db_gen import render
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.runtime.liveness import CompatLiveness
from nsj_queue_lib.runtime.retry import RetryService
from nsj_queue_lib.runtime.service import LEGACY_MAINTENANCE_KEYS, service_lock_key
from nsj_queue_lib.runtime.worker_runtime import WorkerRuntime
from tests.helpers import services
from tests.helpers.databases import unique_queue_name
from tests.helpers.legacy import LEGACY_KEYS
from tests.helpers.processes import (
    enqueue,
    settings_for,
    start_function_worker,
    statuses,
    wait_for,
)

pytestmark = LEGACY_KEYS


@pytest.fixture
def legacy_side(pg_dsn, pg_queue, pg_admin):
    """A session of a 1.2.2 worker: it holds 1.2.2's task keys.

    1.2.2's keys (the bare task id) are database-wide, and a 1.2.2 worker's maintenance
    threads take 1-3: ``pg_queue``'s ids start at a random offset, so that another test run
    on the same server does not hold this queue's keys."""
    start = 1000 + secrets.randbelow(10**9)
    pg_admin.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", (pg_queue.table, start))
    conn = psycopg.connect(pg_dsn, autocommit=True)
    yield conn
    conn.close()


def holds_1_2_2_key(conn, task_id: int) -> bool:
    """Whether some session holds ``pg_advisory_lock(task_id)``: 1.2.2 could not take it."""
    taken = conn.execute("SELECT pg_try_advisory_lock(%s::bigint)", (task_id,)).fetchone()[0]
    if taken:
        conn.execute("SELECT pg_advisory_unlock(%s::bigint)", (task_id,))
    return not taken


def compat_keys(pg_dsn, table, executor_conn) -> PostgresLegacyKeys:
    driver = make_driver(settings_for(pg_dsn, table, queue_compat_1_2_2="ON"))
    store = driver.store()
    store.bind(executor_conn)
    keys = driver.legacy_keys(store, executor_conn)
    assert isinstance(keys, PostgresLegacyKeys)
    return keys


@pytest.mark.parametrize(
    "mode, from_1_2_2, on",
    [
        ("AUTO", True, True),
        ("AUTO", False, False),
        ("AUTO", "index dropped", False),  # docs/upgrading.md, step 4
        ("ON", False, True),
        ("OFF", True, False),
    ],
)
def test_compat_mode_is_on_for_tables_1_2_2_made_unless_set(
    mode, from_1_2_2, on, pg_dsn, pg_queue, pg_admin, legacy_queue
):
    queue = legacy_queue if from_1_2_2 else pg_queue
    if from_1_2_2:
        pg_admin.execute(render("public", queue.name, upgrade=True))
    if from_1_2_2 == "index dropped":
        pg_admin.execute(f"DROP INDEX public.idx_{queue.name}_status_tentativa_data_hora")
    driver = make_driver(settings_for(pg_dsn, queue.table, queue_compat_1_2_2=mode))
    store = driver.store()
    with driver.connect() as conn:
        store.bind(conn)
        assert (driver.legacy_keys(store, conn) is not None) is on


def advisory_locks_of(conn) -> int:
    return conn.execute(
        "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"
    ).fetchone()[0]


def test_a_worker_in_compat_mode_holds_both_keys_of_its_task(pg_dsn, pg_queue, legacy_side):
    first, second = enqueue(pg_dsn, pg_queue.table, [dict(payload="a"), dict(payload="b")])
    driver = make_driver(settings_for(pg_dsn, pg_queue.table))
    with driver.connect(executor=True) as conn:
        liveness = CompatLiveness(compat_keys(pg_dsn, pg_queue.table, conn))
        claim = liveness.claim(conn)
        assert claim is not None and claim.task.id == first and claim.liveness_locked
        # The claim committed with the 1.2.2 key held: 1.2.2 can neither run nor rescue it.
        assert statuses(legacy_side, pg_queue.table) == {"processando": 1, "pendente": 1}
        assert holds_1_2_2_key(legacy_side, first)
        claim = liveness.complete_and_claim(conn, claim.task, "ok", claim_next=True)
        assert claim is not None and claim.task.id == second
        assert statuses(legacy_side, pg_queue.table) == {"sucesso": 1, "processando": 1}
        assert holds_1_2_2_key(legacy_side, second)
        assert liveness.complete_and_claim(conn, claim.task, "ok", claim_next=True) is None
        assert statuses(legacy_side, pg_queue.table) == {"sucesso": 2}
        # Every key went once the work committed (the first's in the second's round trip).
        assert not holds_1_2_2_key(legacy_side, first)
        assert not holds_1_2_2_key(legacy_side, second)
        assert advisory_locks_of(conn) == 0


def test_a_task_whose_1_2_2_key_is_held_is_left_to_that_worker(pg_dsn, pg_queue, legacy_side):
    [task] = enqueue(pg_dsn, pg_queue.table, [dict(payload="a")])
    legacy_side.execute("SELECT pg_advisory_lock(%s::bigint)", (task,))  # 1.2.2 picked it
    driver = make_driver(settings_for(pg_dsn, pg_queue.table))
    with driver.connect(executor=True) as conn:
        keys = compat_keys(pg_dsn, pg_queue.table, conn)
        assert keys.claim(conn) is None
        assert statuses(legacy_side, pg_queue.table) == {"pendente": 1}
        assert advisory_locks_of(conn) == 0  # the claim's own key went with it
        legacy_side.execute("SELECT pg_advisory_unlock(%s::bigint)", (task,))
        claim = keys.claim(conn)
        assert claim is not None and claim.task.id == task


def test_completing_a_task_while_1_2_2_holds_the_next_one(pg_dsn, pg_queue, legacy_side):
    first, second = enqueue(pg_dsn, pg_queue.table, [dict(payload="a"), dict(payload="b")])
    driver = make_driver(settings_for(pg_dsn, pg_queue.table))
    with driver.connect(executor=True) as conn:
        liveness = CompatLiveness(compat_keys(pg_dsn, pg_queue.table, conn))
        claim = liveness.claim(conn)
        assert claim is not None and claim.task.id == first
        legacy_side.execute("SELECT pg_advisory_lock(%s::bigint)", (second,))
        assert liveness.complete_and_claim(conn, claim.task, "ok", claim_next=True) is None
        rows = dict(legacy_side.execute(f"SELECT id, status FROM {pg_queue.table}").fetchall())
        assert rows == {first: "sucesso", second: "pendente"}  # done committed, next left
        assert advisory_locks_of(conn) == 0


def test_compat_retry_service_leaves_1_2_2_running_tasks_and_rescues_the_rest(
    pg_dsn, pg_queue, pg_autocommit, legacy_side
):
    table = pg_queue.table
    running, orphan = enqueue(pg_dsn, table, [dict(payload="r"), dict(payload="o")])
    pg_autocommit.execute(f"UPDATE {table} SET status = 'processando'")
    legacy_side.execute("SELECT pg_advisory_lock(%s::bigint)", (running,))
    service = services.make_service(RetryService, settings_for(pg_dsn, table))
    service.legacy_keys = PostgresLegacyKeys(service.store)
    assert service.run_once() == 1
    rows = dict(
        pg_autocommit.execute(
            f"SELECT id, status FROM {table} WHERE id <= %s", (orphan,)
        ).fetchall()
    )
    assert rows == {running: "processando", orphan: "falha_processando"}
    assert not holds_1_2_2_key(legacy_side, orphan)  # the rescue's key went after its commit

    # Without compatibility mode the 1.2.2 worker's task is taken for dead.
    service.legacy_keys = None
    assert service.run_once() == 1
    assert (
        pg_autocommit.execute(f"SELECT status FROM {table} WHERE id = %s", (running,)).fetchone()[0]
        == "falha_processando"
    )


def test_the_worker_turns_compat_on_at_start_for_a_1_2_2_table(pg_dsn, pg_admin, legacy_queue):
    pg_admin.execute(render("public", legacy_queue.name, upgrade=True))
    runtime = WorkerRuntime(settings_for(pg_dsn, legacy_queue.table), lambda row, conn: None)
    try:
        assert runtime._bind()
        # Inside the per-processo limits' wrapper (runtime/limited.py).
        assert isinstance(runtime.executor.liveness.inner, CompatLiveness)
        [retry] = [s for s in runtime.services if isinstance(s, RetryService)]
        assert retry.legacy_keys is not None
    finally:
        runtime.pool.close()


def test_no_service_of_ours_takes_1_2_2_maintenance_keys():
    assert LEGACY_MAINTENANCE_KEYS == (1, 2, 3)
    keys = {service_lock_key(f"public.q{n}", s) for n in range(2000) for s in ("retry", "purge")}
    assert not keys & set(LEGACY_MAINTENANCE_KEYS)


@pytest.mark.parametrize("changes", [dict(db_driver="MYSQL"), dict(client_server_mode=True)])
def test_compat_on_is_refused_where_1_2_2_keys_are_not_known(changes, pg_dsn):
    settings = settings_for(pg_dsn, "public.q", queue_compat_1_2_2="ON", **changes)
    with pytest.raises(ConfigError) as info:
        WorkerRuntime(settings, lambda row, conn: None)
    assert "QUEUE_COMPAT_1_2_2" in info.value.problems


@pytest.mark.parametrize("fails", [False, True], ids=["returns", "raises"])
def test_dbadapter3_of_bd_conn_conn_writes_in_the_tasks_transaction(
    fails, pg_dsn, pg_queue, pg_admin, pg_autocommit
):
    """1.2.2 handlers wrap ``bd_conn.conn`` in nsj-sql-utils-lib's DBAdapter3 (the real one)."""
    from nsj_sql_utils_lib.dbadapter3 import DBAdapter3

    effects = f"{pg_queue.table}_effects"
    pg_admin.execute(f"CREATE TABLE {effects} (task_id bigint)")

    def execute(payload, tarefa, bd_conn):
        with pytest.warns(DeprecationWarning, match=r"DBAdapter3\(bd_conn\)"):
            db = DBAdapter3(bd_conn.conn)
        db.execute(f"INSERT INTO {effects} (task_id) VALUES (%(id)s)", id=tarefa["id"])
        _, rows = db.execute(f"SELECT count(*) AS n FROM {effects}")
        assert rows == [{"n": 1}]  # its own write, seen in the task's transaction
        if fails:
            raise RuntimeError("handler failed after writing")
        return "written"

    try:
        worker = start_function_worker(pg_dsn, pg_queue, pg_autocommit, execute, queue_max_retry=1)
        [task] = enqueue(pg_dsn, pg_queue.table, [dict(payload="a")])
        done = "falha" if fails else "sucesso"
        wait_for(lambda: statuses(pg_autocommit, pg_queue.table).get(done), 15, done)
        worker.stop()
        count = pg_autocommit.execute(f"SELECT count(*) FROM {effects}").fetchone()[0]
        assert count == (0 if fails else 1)
        row = pg_autocommit.execute(
            f"SELECT mensagem FROM {pg_queue.table} WHERE id = %s", (task,)
        ).fetchone()
        assert ("handler failed" in row[0]) if fails else row[0] == "written"
    finally:
        pg_admin.execute(f"DROP TABLE {effects}")


def test_a_handler_enqueues_on_its_bd_conn(pg_dsn, pg_queue, pg_autocommit):
    """bd_conn is a subclass of the driver's connection (for bd_conn.conn): QueueClient
    still knows it, and the follow-up tasks commit with the handler's task."""
    from nsj_queue_lib import QueueClient

    def execute(payload, tarefa, bd_conn):
        if payload == "first":
            follow_up = dict(origem="o", destino="d", processo="p", chave_externa=None)
            client = QueueClient(bd_conn, pg_queue.table)
            client.insert_tasks([dict(follow_up, payload="next")] * 150)
        return None

    worker = start_function_worker(pg_dsn, pg_queue, pg_autocommit, execute)
    try:
        enqueue(pg_dsn, pg_queue.table, [dict(payload="first")])
        wait_for(lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 151}, 30, "all")
    finally:
        worker.stop()


@pytest.mark.mysql
def test_dbadapter3_of_bd_conn_conn_on_mysql(mysql_kwargs, mysql_admin):
    """On MySQL/MariaDB too, a worker connection's ``.conn`` is itself: DBAdapter3 writes in
    the transaction the worker opened, and goes with its rollback."""
    from nsj_sql_utils_lib.dbadapter3 import DBAdapter3

    from nsj_queue_lib.settings import Settings

    table = f"{unique_queue_name('e_')}"
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (task_id bigint)")
    settings = Settings(
        db_host=mysql_kwargs["host"],
        db_port=mysql_kwargs["port"],
        db_name=mysql_kwargs["database"],
        db_user=mysql_kwargs["user"],
        db_pass=mysql_kwargs["password"],
        db_driver="MYSQL",
        queue_name="q",
        queue_table="q",
    )
    conn = make_driver(settings).connect(executor=True)
    try:
        for task_id, end in ((1, "ROLLBACK"), (2, "COMMIT")):
            with conn.cursor() as cur:
                cur.execute("BEGIN")
            with pytest.warns(DeprecationWarning):
                db = DBAdapter3(conn.conn)
            db.execute(f"INSERT INTO {table} (task_id) VALUES (%(id)s)", id=task_id)
            with conn.cursor() as cur:
                cur.execute(end)
        with mysql_admin.cursor() as cur:
            cur.execute(f"SELECT task_id FROM {table}")
            assert cur.fetchall() == ((2,),)
    finally:
        conn.close()
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP TABLE {table}")
