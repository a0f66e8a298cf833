"""Guards of the MySQL family's stores that no other test would miss (scripts/mutants.py).

- Some operations are several statements whose later ones check again what
  an earlier one found: the purge deletes by id with the status checked
  again, the orphan rescue locks its candidates with their liveness lock
  checked again, and SingleStore's claim (no SKIP LOCKED) wins a candidate
  it read with a conditional update. The race between the statements is
  made deterministic: the connection under test runs a hook, right after
  the first statement, that changes the row or the lock from another
  session.
- Claims, by the claim procedure and by the claim without database locks
  (client/server mode): priority order, the liveness lock taken on the
  claiming session (the procedure) or none (the socket server holds it),
  and a held ready row passed without reaching a task not yet due.
- The procedure's branch for a claim without its index takes the liveness
  lock like the others.
"""

from __future__ import annotations

import datetime

import pytest

from nsj_queue_lib import QueueClient
from nsj_queue_lib.db.mysql.driver import configure_session
from nsj_queue_lib.db.mysql.store import MysqlQueueStore
from nsj_queue_lib.db.singlestore.store import SingleStoreQueueStore
from nsj_queue_lib.model import TaskRecord
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
def store(mysql_queue, mysql_admin):
    """The queue's store, bound as a worker binds it at start."""
    store = MysqlQueueStore(mysql_queue.table, mysql_queue.subscriber_table)
    store.bind(mysql_admin)
    return store


@pytest.fixture
def service_conn(mysql_kwargs, mysql_queue, store):
    """A connection set up as the maintenance services' are (READ COMMITTED, UTC)."""
    conn = connect(mysql_kwargs, autocommit=True)
    configure_session(conn, executor=False)
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
        assert store.find_orphans(conn, 10, check_session_locks=True) == []
        assert conn.hooked
        store.rollback(conn)
        # Once that worker is gone, the same row is an orphan again.
        fetch_value(worker, "SELECT RELEASE_LOCK(%s)", (lock_name,))
        store.begin(service_conn)
        orphans = store.find_orphans(service_conn, 10, check_session_locks=True)
        assert [t.id for t in orphans] == [orphan]
        store.rollback(service_conn)
    finally:
        worker.close()


# -- claims: the claim procedure, and the claim without database locks ----------------------


@pytest.fixture(params=["claim procedure", "claim without locks"])
def path(request) -> str:
    """The claim procedure (liveness locks in the database), or the claim of a worker whose
    liveness locks live in the socket server (plain SQL, left uncommitted until it has one)."""
    return request.param


def claim(store, conn, path: str) -> TaskRecord | None:
    """The next task by ``path``, its claim committed (the task's transaction open)."""
    if path == "claim procedure":
        claimed = store.claim(conn)
        return None if claimed is None else claimed.task
    task = store.claim_uncommitted(conn)
    if task is not None:
        store.commit_and_begin(conn)  # as ServerLiveness does once the server's lock is taken
    return task


def complete_and_claim(store, conn, path: str, task_id: int) -> TaskRecord | None:
    if path == "claim procedure":
        claimed = store.complete_and_claim(conn, task_id, "ok", claim_next=True)
        return None if claimed is None else claimed.task
    assert store.complete_if_running(conn, task_id, "ok")
    store.commit(conn)
    return claim(store, conn, path)


def test_a_claim_passing_a_held_ready_row_never_reaches_a_task_not_yet_due(
    path, mysql_queue, store, enqueue, mysql_worker_conn, mysql_admin, mysql_kwargs
):
    """The only ready task is row-locked elsewhere; the task after it in claim order is due in an hour.

    The claim passes the held row at once and finds nothing else ready. A
    claim that waited on the row instead would fail on the short lock wait
    timeout set here (after the store's own retries), not hang the test.
    """
    with mysql_worker_conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
    ready = enqueue()
    later = enqueue(days_old=-1 / 24)
    other = connect(mysql_kwargs)
    try:
        with other.cursor() as cur:
            cur.execute(f"SELECT id FROM {mysql_queue.table} WHERE id = %s FOR UPDATE", (ready,))
        assert claim(store, mysql_worker_conn, path) is None
    finally:
        # A rollback returns once the server has released the row; a bare close
        # does not wait for it, and a loaded server may still hold the lock.
        other.rollback()
        other.close()
    assert statuses(mysql_admin, mysql_queue.table) == {ready: "pendente", later: "pendente"}
    task = claim(store, mysql_worker_conn, path)  # released: claimed now
    assert task is not None and task.id == ready
    store.rollback(mysql_worker_conn)


def test_one_executor_drains_by_priority_then_age(
    path, mysql_queue, store, enqueue, mysql_worker_conn, mysql_admin
):
    """Claims, each after a completion, by either path; each task's liveness lock is held by
    the claiming session (the procedure) or by none (the socket server holds it)."""
    older, newer = enqueue(days_old=2), enqueue(days_old=1)
    low, high = enqueue(days_old=3), enqueue(days_old=0.5)
    with mysql_worker_conn.cursor() as cur:
        cur.execute(f"UPDATE {mysql_queue.table} SET prioridade = 10 WHERE id = %s", (low,))
        cur.execute(f"UPDATE {mysql_queue.table} SET prioridade = 90 WHERE id = %s", (high,))
    holder = mysql_worker_conn.thread_id() if path == "claim procedure" else None
    order = []
    task = claim(store, mysql_worker_conn, path)
    while task is not None:
        order.append(task.id)
        name = store.task_lock_name(mysql_admin, task.id)
        assert fetch_value(mysql_admin, "SELECT IS_USED_LOCK(%s)", (name,)) == holder
        task = complete_and_claim(store, mysql_worker_conn, path, task.id)
    assert order == [high, older, newer, low]


# -- the claim procedure without its index ---------------------------------------------------


def test_a_claim_without_the_claim_index_takes_the_liveness_lock(
    store, enqueue, mysql_worker_conn, mysql_worker_conn_2, mysql_admin, mysql_queue
):
    """The procedure's branch for a failed look-up claims from the start, lock included."""
    with mysql_admin.cursor() as cur:
        cur.execute(f"DROP INDEX {mysql_queue.claim_index} ON {mysql_queue.table}")
    first, second = enqueue(), enqueue()
    store.bind(mysql_worker_conn)  # the claim procedure is there: the CALL is what claims here

    def holder(task_id: int):
        name = store.task_lock_name(mysql_admin, task_id)
        return fetch_value(mysql_admin, "SELECT IS_USED_LOCK(%s)", (name,))

    claimed = store.claim(mysql_worker_conn)
    assert claimed is not None
    assert claimed.task.id == first and claimed.liveness_locked is True
    assert holder(first) == mysql_worker_conn.thread_id()
    # After a completion the next claim goes through the same branch.
    claimed = store.complete_and_claim(mysql_worker_conn, first, "ok", claim_next=True)
    assert claimed is not None
    assert claimed.task.id == second and claimed.liveness_locked is True
    assert holder(first) is None
    assert holder(second) == mysql_worker_conn.thread_id()
    # Another executor cannot take it: the lock is real, not just reported.
    name = store.task_lock_name(mysql_worker_conn_2, second)
    assert fetch_value(mysql_worker_conn_2, "SELECT GET_LOCK(%s, 0)", (name,)) == 0
    store.rollback(mysql_worker_conn)


# -- SingleStore's claim: a conditional update -----------------------------------------------


def test_a_singlestore_claim_never_takes_a_row_that_changed_after_it_was_read(
    mysql_queue, enqueue, mysql_kwargs, mysql_admin
):
    """Between the claim's read of its candidates and its update, another worker claims and
    finishes the first one: the claim takes the next candidate, never a finished task.

    The SingleStore store on MariaDB (it only uses SQL MariaDB shares), on the MySQL table.
    """
    store = SingleStoreQueueStore(mysql_queue.table)
    first, second = enqueue(), enqueue()

    def another_worker_runs_it() -> None:
        with mysql_admin.cursor() as cur:
            cur.execute(
                f"UPDATE {mysql_queue.table} SET status = 'sucesso' WHERE id = %s", (first,)
            )

    worker = connect(mysql_kwargs, autocommit=True)  # a SingleStore session needs no set-up
    try:
        conn = AfterStatement(
            worker, store.sql["claim_tasks"]["candidates"], another_worker_runs_it
        )
        task = store.claim_uncommitted(conn)
        assert conn.hooked
        assert task is not None and task.id == second
        store.commit_and_begin(conn)
        assert statuses(mysql_admin, mysql_queue.table) == {first: "sucesso", second: "processando"}
        store.rollback(conn)
    finally:
        worker.close()
