"""Guards of the PostgreSQL claim and worker that no other test would miss (scripts/mutants.py).

- A ready row that another session holds locked (a handler updating a task
  by id, a claim in flight) must be passed at once by every claim path: the
  claim function, at an executor's first claim and after a completion, and
  the claim of a worker whose liveness locks live in the socket server
  (``claim_uncommitted``). Without ``SKIP LOCKED`` the claim would wait on
  the row; the claiming session's ``lock_timeout`` turns that wait into an
  error instead of a slow pass. The claim function also takes the claimed
  task's liveness lock on the claiming session; the client/server claim
  takes none (the socket server holds it).
- An attempt whose liveness lock a live session holds is no orphan.
- The purge keeps old 'pendente' rows and rows younger than its max age.
- ``bind`` refuses a claim function that is missing or of another version,
  and the worker then refuses to start.
- A supervised thread that dies stops the worker (exit code 3).
"""

from __future__ import annotations

import datetime
import threading

import psycopg
import pytest

from nsj_queue_lib.db.dialect import claim_routine_name
from nsj_queue_lib.db.driver import make_driver
from nsj_queue_lib.exceptions import ClaimRoutineError
from nsj_queue_lib.runtime.worker_runtime import (
    EXIT_CONFIG_ERROR,
    EXIT_THREAD_DIED,
    WorkerRuntime,
)
from tests.helpers.processes import enqueue, fetch_rows, settings_for

UTC = datetime.timezone.utc


@pytest.fixture
def driver(pg_dsn, pg_queue):
    return make_driver(settings_for(pg_dsn, pg_queue.table))


@pytest.fixture
def store(driver, pg_admin):
    store = driver.store()
    store.bind(pg_admin)
    return store


@pytest.fixture
def worker_conn(driver):
    """An executor's connection, as the runtime opens it (autocommit)."""
    conn = driver.connect(autocommit=True, executor=True)
    # A claim that waits on a row lock fails after this instead of hanging the test.
    conn.execute("SET lock_timeout = '2s'")
    yield conn
    conn.close()


@pytest.fixture
def row_holder(pg_dsn, pg_queue):
    """row_holder(task_id): another session locks that row by id, in a transaction left open."""
    conn = psycopg.connect(pg_dsn)

    def hold(task_id: int) -> None:
        conn.execute(f"SELECT id FROM {pg_queue.table} WHERE id = %s FOR UPDATE", (task_id,))

    yield hold
    conn.rollback()
    conn.close()


def liveness_lock_holder(conn, queue_oid: int, task_id: int) -> int | None:
    """The backend pid holding a task's liveness lock (queue oid, id mod 2^31), or None."""
    row = conn.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 2",
        (queue_oid, task_id % 2**31),
    ).fetchone()
    return None if row is None else row[0]


def statuses(conn, table: str) -> dict[int, str]:
    return {r["id"]: r["status"] for r in fetch_rows(conn, table)}


# -- SKIP LOCKED and the liveness lock, on every claim path -----------------------------------


@pytest.mark.parametrize("path", ["first claim", "after a completion", "client/server claim"])
def test_a_claim_passes_a_ready_row_another_session_holds_without_waiting(
    path, pg_queue, pg_dsn, pg_admin, store, worker_conn, row_holder
):
    first, second, third = enqueue(
        pg_dsn,
        pg_queue.table,
        [dict(payload="a", prioridade=90), dict(payload="b", prioridade=80), dict(payload="c")],
    )
    locked: bool | None = None
    if path == "first claim":
        row_holder(first)
        claim = store.claim(worker_conn)
        expected = second
    elif path == "after a completion":
        running = store.claim(worker_conn)
        assert running is not None and running.task.id == first
        row_holder(second)
        claim = store.complete_and_claim(worker_conn, first, "ok", claim_next=True)
        expected = third
    else:
        row_holder(first)
        task = store.claim_uncommitted(worker_conn)
        assert task is not None and task.id == second
        # Nobody sees it claimed before the caller took its lock on the server and committed.
        assert statuses(pg_admin, pg_queue.table)[second] == "pendente"
        store.commit_and_begin(worker_conn)
        claim, expected = None, second
    if claim is not None:
        task, locked = claim.task, claim.liveness_locked
    assert task.id == expected
    assert statuses(pg_admin, pg_queue.table)[expected] == "processando"
    holder = liveness_lock_holder(pg_admin, store.queue_number, expected)
    if path == "client/server claim":
        assert holder is None  # the socket server holds it
    else:
        # Claimed with its liveness lock, on the connection that will run it.
        assert locked is True
        assert holder == worker_conn.info.backend_pid
    worker_conn.execute("ROLLBACK")


# -- crash recovery ------------------------------------------------------------------------------


def test_an_attempt_whose_liveness_lock_is_held_is_no_orphan(
    pg_dsn, pg_queue, driver, store, pg_admin
):
    """Claimed, then its handler's transaction committed: no row lock is left, only the
    liveness lock says that its worker is alive."""
    [task_id] = enqueue(pg_dsn, pg_queue.table, [dict(payload="running")])
    worker = driver.connect(autocommit=True, executor=True)
    rescuer = driver.connect(autocommit=False)
    try:
        claim = store.claim(worker)
        assert claim is not None and claim.task.id == task_id
        store.commit(worker)  # the handler's transaction: no row lock is left
        assert store.find_orphans(rescuer, 10, check_session_locks=True) == []
        rescuer.rollback()
        store.unlock_task(worker, task_id)  # as when its worker's session ends
        [orphan] = store.find_orphans(rescuer, 10, check_session_locks=True)
        assert orphan.id == task_id
        rescuer.rollback()
    finally:
        worker.close()
        rescuer.close()


# -- purge ----------------------------------------------------------------------------------------


def test_a_purge_round_deletes_only_settled_rows_older_than_the_max_age(
    pg_dsn, pg_queue, store, pg_admin
):
    """A round of 2 takes the two oldest settled rows, never the older 'pendente' one."""
    now = datetime.datetime.now(UTC)
    table = pg_queue.table
    plan = [("pendente", 50), ("sucesso", 40), ("falha", 39), ("sucesso", 35), ("sucesso", 1)]
    ids = enqueue(
        pg_dsn,
        table,
        [
            dict(payload=f"p{n}", data_hora=now - datetime.timedelta(days=d))
            for n, (_, d) in enumerate(plan)
        ],
    )
    for task_id, (status, _) in zip(ids, plan, strict=True):
        pg_admin.execute(f"UPDATE {table} SET status = %s WHERE id = %s", (status, task_id))
    waiting, old_a, old_b, last, recent = ids
    conn = psycopg.connect(pg_dsn)
    try:
        assert store.purge_round(conn, 30, 2) == 2
        conn.commit()
        assert set(statuses(pg_admin, table)) == {waiting, last, recent}
        assert store.purge_round(conn, 30, 2) == 1
        assert store.purge_round(conn, 30, 2) == 0
        conn.commit()
    finally:
        conn.close()
    assert statuses(pg_admin, table) == {waiting: "pendente", recent: "sucesso"}
    assert {old_a, old_b}.isdisjoint(statuses(pg_admin, table))


# -- the worker's start and its threads ---------------------------------------------------------


def run_briefly(runtime: WorkerRuntime, timeout: float = 5.0) -> int | None:
    """``runtime.run()`` in a thread: its exit code, or None (and stopped) when it still runs
    after ``timeout``; what it raised is raised here."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(runtime.run(install_signal_handlers=False))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        runtime.stop()
        thread.join(15)
        return None
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def handler(row, conn) -> str:
    return "ok"


def spoil_claim_function(admin, queue, how: str) -> None:
    function = claim_routine_name(queue.table)
    if how == "missing":
        admin.execute(f"DROP FUNCTION {function}")
    else:
        admin.execute(
            f"COMMENT ON FUNCTION {function}(bigint, text, integer, integer, integer) "
            "IS 'nsj_queue_lib claim 0000000000000000'"
        )


@pytest.mark.parametrize("how", ["missing", "of another version"])
def test_bind_refuses_a_claim_function_missing_or_of_another_version(
    how, pg_queue, driver, pg_admin
):
    spoil_claim_function(pg_admin, pg_queue, how)
    with pytest.raises(ClaimRoutineError, match="--upgrade"):
        driver.store().bind(pg_admin)


@pytest.mark.xfail(
    strict=True,
    raises=RuntimeError,
    reason="library bug: WorkerRuntime._shut_down joins the executor threads, which never "
    "started when bind refused the queue (RuntimeError: cannot join thread before it is started)",
)
def test_a_worker_whose_claim_function_is_missing_refuses_to_start(pg_dsn, pg_queue, pg_admin):
    spoil_claim_function(pg_admin, pg_queue, "missing")
    [task_id] = enqueue(pg_dsn, pg_queue.table, [dict(payload="never")])
    runtime = WorkerRuntime(settings_for(pg_dsn, pg_queue.table), handler)
    assert run_briefly(runtime) == EXIT_CONFIG_ERROR
    assert "--upgrade" in (runtime.exit_message or "")
    assert statuses(pg_admin, pg_queue.table) == {task_id: "pendente"}


# The dying thread is what the test is about: pytest need not report its exception.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("thread", ["a service", "an executor thread"])
def test_a_thread_that_dies_stops_the_worker(thread, pg_dsn, pg_queue):
    runtime = WorkerRuntime(settings_for(pg_dsn, pg_queue.table), handler)

    def die(*args) -> bool:
        raise RuntimeError("this thread dies")

    if thread == "a service":
        runtime.services[0].run = die
    else:
        runtime.executor._take_token = die
    assert run_briefly(runtime, timeout=3.0) == EXIT_THREAD_DIED
    assert "ended unexpectedly" in (runtime.exit_message or "")
