"""Guards of the MySQL store that no other test would miss (issue 22, scripts/mutants.py).

- Two operations are several statements whose later ones check again what
  an earlier one found: the purge deletes by id with the status checked
  again, and the orphan rescue locks its candidates with their liveness lock
  checked again. The race between the statements is made deterministic: the
  connection under test runs a hook, right after the first statement, that
  changes the row or the lock from another session.
- Single-task claims, by the claim procedure and in plain SQL: priority
  order, and a held ready row passed without reaching a task not yet due.
- The procedure's branch for a claim without its index takes the liveness
  lock like the others.
"""

from __future__ import annotations

import datetime

import pytest

from nsj_queue_lib import QueueClient
from nsj_queue_lib.db.dialect import claim_routine_name, get_dialect
from tests.helpers.mysql_queue import connect, fetch_dicts, fetch_value

pytestmark = pytest.mark.mysql

UTC = datetime.timezone.utc
TASK = dict(origem="erp", destino="fiscal", processo="emitir_nota", chave_externa="k", payload="p")


class AfterStatement:
    """A connection that calls ``hook()`` once, right after it ran the statement ``sql``.

    Everything else goes to the real PyMySQL connection.
    """

    def __init__(self, conn, sql: str, hook):
        self._conn = conn
        self._sql = sql
        self._hook = hook
        self.hooked = False

    def cursor(self, *args, **kwargs):
        return _HookedCursor(self, self._conn.cursor(*args, **kwargs))

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def _ran(self, sql: str) -> None:
        if not self.hooked and sql == self._sql:
            self.hooked = True
            self._hook()


class _HookedCursor:
    def __init__(self, owner: AfterStatement, cursor):
        self._owner = owner
        self._cursor = cursor

    def execute(self, sql, args=None):
        count = self._cursor.execute(sql, args)
        self._owner._ran(sql)
        return count

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._cursor.close()

    def __getattr__(self, name):
        return getattr(self._cursor, name)


def days_ago(days: float) -> datetime.datetime:
    return datetime.datetime.now(UTC) - datetime.timedelta(days=days)


@pytest.fixture
def store(mysql_queue):
    return get_dialect("mysql").store(mysql_queue.table, mysql_queue.subscriber_table)


@pytest.fixture
def service_conn(mysql_kwargs, mysql_queue, store):
    """A connection set up as the maintenance services' are (READ COMMITTED, UTC)."""
    conn = connect(mysql_kwargs, autocommit=True)
    store.configure_connection(conn)
    yield conn
    conn.close()


@pytest.fixture
def enqueue(mysql_kwargs, mysql_queue):
    """enqueue(status, days_old) -> id: a committed task, then set to ``status`` by hand."""
    conn = connect(mysql_kwargs, autocommit=True)

    def insert(status: str = "pendente", days_old: float = 0) -> int:
        client = QueueClient(conn, mysql_queue.table)
        task_id = client.insert_task(**TASK, data_hora=days_ago(days_old))
        with conn.cursor() as cur:
            cur.execute(
                f"UPDATE {mysql_queue.table} SET status = %s WHERE id = %s", (status, task_id)
            )
        return task_id

    try:
        yield insert
    finally:
        conn.close()


def statuses(admin, table: str) -> dict[int, str]:
    return {r["id"]: r["status"] for r in fetch_dicts(admin, f"SELECT id, status FROM {table}")}


# -- purge -------------------------------------------------------------------------------


def test_an_old_pending_task_takes_no_place_in_a_purge_round(
    store, enqueue, service_conn, mysql_admin, mysql_queue
):
    """The oldest row is 'pendente': a round of 2 still deletes two settled rows, and never it."""
    waiting = enqueue("pendente", days_old=50)
    settled = [enqueue(status, days_old=40 - n) for n, status in enumerate(("sucesso", "falha"))]
    last = enqueue("sucesso", days_old=35)
    assert store.purge_round(service_conn, 30, 2) == 2
    assert statuses(mysql_admin, mysql_queue.table) == {waiting: "pendente", last: "sucesso"}
    assert set(settled).isdisjoint(statuses(mysql_admin, mysql_queue.table))
    assert store.purge_round(service_conn, 30, 2) == 1
    assert store.purge_round(service_conn, 30, 2) == 0
    assert statuses(mysql_admin, mysql_queue.table) == {waiting: "pendente"}


def test_a_row_put_back_to_pendente_after_the_purge_selected_it_is_not_deleted(
    store, enqueue, service_conn, mysql_admin, mysql_queue
):
    """Between the purge's select and its delete, a settled row is put back to 'pendente' by hand."""
    put_back, settled = enqueue("falha", days_old=40), enqueue("sucesso", days_old=39)

    def put_it_back() -> None:
        with mysql_admin.cursor() as cur:
            cur.execute(
                f"UPDATE {mysql_queue.table} SET status = 'pendente' WHERE id = %s", (put_back,)
            )

    conn = AfterStatement(service_conn, store.sql["purge"]["select"], put_it_back)
    assert store.purge_round(conn, 30, 10) == 1
    assert conn.hooked
    assert statuses(mysql_admin, mysql_queue.table) == {put_back: "pendente"}
    assert settled not in statuses(mysql_admin, mysql_queue.table)


# -- orphan rescue -------------------------------------------------------------------------


def test_an_orphan_whose_lock_is_taken_after_the_candidates_step_is_not_rescued(
    store, enqueue, service_conn, mysql_kwargs
):
    """Found without a liveness lock, then locked by a worker before the rescuer locks the row."""
    orphan = enqueue("processando")
    worker = connect(mysql_kwargs, autocommit=True)
    try:
        lock_name = store.task_lock_name(worker, orphan)

        def a_worker_takes_the_lock() -> None:
            assert fetch_value(worker, "SELECT GET_LOCK(%s, 0)", (lock_name,)) == 1

        conn = AfterStatement(
            service_conn, store.sql["find_orphans"]["candidates"], a_worker_takes_the_lock
        )
        store.begin(conn)
        assert store.find_orphans(conn, None, 10) == []
        assert conn.hooked
        store.rollback(conn)
        # Once that worker is gone, the same row is an orphan again.
        fetch_value(worker, "SELECT RELEASE_LOCK(%s)", (lock_name,))
        store.begin(service_conn)
        assert [t["id"] for t in store.find_orphans(service_conn, None, 10)] == [orphan]
        store.rollback(service_conn)
    finally:
        worker.close()


# -- single-task claims, by the procedure and in plain SQL ------------------------------------


@pytest.fixture(params=["claim procedure", "plain SQL"])
def path(request, mysql_queue, mysql_admin) -> str:
    """The claim procedure db_gen creates, or none (an older DDL): the store claims in plain SQL."""
    if request.param == "plain SQL":
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP PROCEDURE {claim_routine_name(mysql_queue.table)}")
    return request.param


def test_a_claim_passing_a_held_ready_row_never_reaches_a_task_not_yet_due(
    path, mysql_queue, enqueue, mysql_worker_conn, mysql_admin, mysql_kwargs
):
    """The only ready task is row-locked elsewhere; the task after it in claim order is due in an hour.

    The claim passes the held row at once and finds nothing else ready. A
    claim that waited on the row instead would fail on the short lock wait
    timeout set here (after the store's own retries), not hang the test.
    """
    with mysql_worker_conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
    store = get_dialect("mysql").store(mysql_queue.table)
    ready = enqueue()
    later = enqueue(days_old=-1 / 24)
    other = connect(mysql_kwargs)
    try:
        with other.cursor() as cur:
            cur.execute(f"SELECT id FROM {mysql_queue.table} WHERE id = %s FOR UPDATE", (ready,))
        assert store.claim(mysql_worker_conn, 1) == []
    finally:
        other.close()
    assert statuses(mysql_admin, mysql_queue.table) == {ready: "pendente", later: "pendente"}
    [task] = store.claim(mysql_worker_conn, 1)  # released: claimed now
    assert task["id"] == ready
    store.rollback(mysql_worker_conn)


def test_one_executor_drains_by_priority_then_age(path, mysql_queue, enqueue, mysql_worker_conn):
    """Single-task claims, each after a completion, by either path: the procedure's or plain SQL's."""
    older, newer = enqueue(days_old=2), enqueue(days_old=1)
    low, high = enqueue(days_old=3), enqueue(days_old=0.5)
    with mysql_worker_conn.cursor() as cur:
        cur.execute(f"UPDATE {mysql_queue.table} SET prioridade = 10 WHERE id = %s", (low,))
        cur.execute(f"UPDATE {mysql_queue.table} SET prioridade = 90 WHERE id = %s", (high,))
    store = get_dialect("mysql").store(mysql_queue.table)
    order = []
    tasks = store.claim(mysql_worker_conn, 1)
    while tasks:
        order.append(tasks[0]["id"])
        tasks = store.complete_and_claim(
            mysql_worker_conn, order[-1], "ok", store.task_lock_keys(0, order[-1]), 1
        )
    assert order == [high, older, newer, low]


# -- the claim procedure without its index ---------------------------------------------------


def test_a_claim_without_the_claim_index_takes_the_liveness_lock(
    store, enqueue, mysql_worker_conn, mysql_worker_conn_2, mysql_admin, mysql_queue
):
    """The procedure's branch for a failed look-up claims from the start, lock included."""
    with mysql_admin.cursor() as cur:
        cur.execute(f"DROP INDEX {mysql_queue.claim_index} ON {mysql_queue.table}")
    first, second = enqueue(), enqueue()
    assert store._has_claim_procedure(mysql_worker_conn)  # the CALL is what claims here

    def holder(task_id: int):
        name = store.task_lock_name(mysql_admin, task_id)
        return fetch_value(mysql_admin, "SELECT IS_USED_LOCK(%s)", (name,))

    [task] = store.claim(mysql_worker_conn, 1)
    assert task["id"] == first and task["liveness_locked"] is True
    assert holder(first) == mysql_worker_conn.thread_id()
    # After a completion the next claim goes through the same branch.
    [task] = store.complete_and_claim(
        mysql_worker_conn, first, "ok", store.task_lock_keys(0, first), 1
    )
    assert task["id"] == second and task["liveness_locked"] is True
    assert holder(first) is None
    assert holder(second) == mysql_worker_conn.thread_id()
    # Another executor cannot take it: the lock is real, not just reported.
    name = store.task_lock_name(mysql_worker_conn_2, second)
    assert fetch_value(mysql_worker_conn_2, "SELECT GET_LOCK(%s, 0)", (name,)) == 0
    store.rollback(mysql_worker_conn)
