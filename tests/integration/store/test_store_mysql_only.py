"""What only the MySQL family does: its sessions, lock names, claim procedure, lock errors, inserts.

- The claim procedure (claim_procedure.sql) commits a finished task before
  it claims the next one, and names the completed task in @nsjq_completed:
  a failing claim is undone alone, never with the finished task's work.
- Deadlocks (1213) and lock wait timeouts (1205) while claiming or
  completing are retried by the store, never recorded as a task failure.
  Triggers signal them on demand, armed by a session variable of the
  worker's session (user variables are not transactional: they disarm
  themselves).
- Ids of multi-row inserts are read back three ways: RETURNING (MariaDB),
  LAST_INSERT_ID and consecutive ids (MySQL 8), one row per INSERT
  (SingleStore); TIMESTAMP columns end in 2038.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
import time
import uuid

import pymysql
import pytest

from nsj_queue_lib import Workflow, model
from nsj_queue_lib.db.mysql import errors as mysql_errors
from nsj_queue_lib.db.mysql import rows as mysql_rows
from nsj_queue_lib.db.mysql import store as mysql_store
from nsj_queue_lib.db.mysql.dialect import claim_procedure_version
from nsj_queue_lib.db.mysql.names import ServerInfo
from nsj_queue_lib.db.mysql.procedure import StatementFailed, call_procedure
from nsj_queue_lib.db.mysql.store import MysqlQueueStore
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.model import PROCESSANDO
from nsj_queue_lib.settings import MAX_BATCH_SIZE
from nsj_queue_lib.workflow.steps import checkpoints_of
from tests.helpers import mysql_queue as mysql_helpers
from tests.integration.store.backends import MYSQL, MYSQL_PARTITIONED, TASK, UTC, execute, on, value
from tests.integration.store.test_store_claim import HOSTILE_PAYLOADS, enqueue_hostile_payloads

pytestmark = on(MYSQL, MYSQL_PARTITIONED)

DEADLOCK = "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found (test)'"


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(mysql_errors, "RETRY_BASE_DELAY", 0.0)


@contextlib.contextmanager
def trigger(backend, body: str):
    """A BEFORE UPDATE trigger on the queue table for the block (``body``: its statements)."""
    name = f"{backend.queue.name}_t{uuid.uuid4().hex[:6]}"
    backend.execute(
        f"CREATE TRIGGER {name} BEFORE UPDATE ON {backend.table} FOR EACH ROW BEGIN {body} END"
    )
    try:
        yield
    finally:
        backend.execute(f"DROP TRIGGER IF EXISTS {backend.queue.database}.{name}")


def explode_on_claim(backend):
    """Fails a claim's UPDATE once, when the session sets @nsjq_test_explode: 1213 a deadlock,
    anything else a plain error."""
    return trigger(
        backend,
        "IF NEW.status = 'processando' AND @nsjq_test_explode IS NOT NULL THEN "
        "SET @nsjq_test_errno = @nsjq_test_explode, @nsjq_test_explode = NULL; "
        f"IF @nsjq_test_errno = 1213 THEN {DEADLOCK}; "
        "ELSE SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the claim exploded (test)'; END IF; "
        "END IF;",
    )


def set_variable(conn, name: str, number: int | None) -> None:
    execute(conn, f"SET @{name} = %s", (number,))


def failures(backend) -> int:
    return backend.count("status LIKE 'falha%%'")


# -- sessions and names ---------------------------------------------------------------


def test_executor_sessions_are_repeatable_read_and_the_others_read_committed_all_utc(backend):
    for executor, isolation in ((True, "REPEATABLE-READ"), (False, "READ-COMMITTED")):
        conn = backend.worker(executor=executor)
        assert value(conn, "SELECT @@session.tx_isolation") == isolation
        assert value(conn, "SELECT @@session.time_zone") == "+00:00"
        assert value(conn, "SELECT @@autocommit") == 1


def test_lock_names_fit_and_name_the_queue(backend, store, worker):
    name = store.task_lock_name(worker, 2**63 - 1)
    assert len(name) <= 64 and name.startswith(f"nsjq:{backend.table}:")
    assert len(store.service_lock_name(worker, -(2**63))) <= 64
    # A 63-character table name of this test's own: two tests running at once (the layouts,
    # the xdist workers) must not share the lock taken below.
    long_table = (backend.queue.name + "q" * 63)[:63]
    long_store = backend.new_store(f"{backend.queue.database}.{long_table}")
    assert len(long_store.task_lock_name(worker, 2**63 - 1)) <= 64
    # The name really works as a MySQL lock name.
    long_name = long_store.service_lock_name(worker, -(2**63))
    assert value(worker, "SELECT GET_LOCK(%s, 0)", (long_name,)) == 1
    assert value(worker, "SELECT RELEASE_LOCK(%s)", (long_name,)) == 1
    # Another queue's service lock with the same key is another lock.
    key = -1234567890123
    assert store.try_service_lock(worker, key) is True
    assert backend.value("SELECT IS_USED_LOCK(%s)", (store.service_lock_name(worker, key),)) == (
        worker.thread_id()
    )
    assert backend.new_store(f"{backend.table}_other").try_service_lock(backend.worker(), key)


# -- the claim procedure ----------------------------------------------------------------


def test_the_claim_procedure_of_this_version_is_what_claims(backend, worker):
    backend.enqueue()
    store = backend.new_store()
    store.bind(worker)
    backend.drop_claim_routine()
    backend.execute(
        f"CREATE PROCEDURE {backend.claim_routine}(IN p_task_id BIGINT, "
        "IN p_mensagem VARCHAR(500), IN p_lock_prefix VARCHAR(64), IN p_handled LONGTEXT, "
        "IN p_processos LONGTEXT, IN p_worker VARCHAR(200)) "
        f"COMMENT '{claim_procedure_version()}' "
        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the stand-in procedure ran (test)'"
    )
    assert backend.new_store().bind(worker)  # the stand-in passes the check
    with pytest.raises(DatabaseError, match="stand-in procedure ran"):
        store.claim(worker)
    assert not backend.in_transaction(worker)


def test_deadlocks_in_a_claim_are_retried_five_times_at_most(backend, store, worker):
    task_id = backend.enqueue()
    with explode_on_claim(backend):
        set_variable(worker, "nsjq_test_explode", 1213)
        assert store.claim(worker).task.id == task_id  # the second try claims
    store.rollback(worker)
    store.release(worker, task_id)
    store.unlock_task(worker, task_id)
    with trigger(backend, f"IF NEW.status = 'processando' THEN {DEADLOCK}; END IF;"):
        with pytest.raises(DatabaseError, match="claim failed 5 times") as info:
            store.claim(worker)
    assert isinstance(info.value.__cause__, pymysql.err.OperationalError)
    assert not backend.in_transaction(worker)
    assert backend.row(task_id)["status"] == "pendente"
    assert backend.liveness_lock_holder(task_id) is None


def claim_then_handle(backend, store, worker, task_id: int) -> None:
    """Claim ``task_id`` and let its handler write tenant = 99 in the task's transaction."""
    assert store.claim(worker).task.id == task_id
    execute(worker, f"UPDATE {backend.table} SET tenant = 99 WHERE id = %s", (task_id,))


def test_a_claim_failing_after_the_completion_keeps_the_finished_task_and_claims_nothing(
    backend, store, worker, caplog
):
    """The completion commits before the claim: a failing claim is undone alone."""
    first, second = backend.enqueue({"prioridade": 90}, {"prioridade": 10})
    with explode_on_claim(backend):
        claim_then_handle(backend, store, worker, first)
        set_variable(worker, "nsjq_test_explode", 0)
        assert store.complete_and_claim(worker, first, "ok", claim_next=True) is None
    assert "claiming the next task failed" in caplog.text and "exploded" in caplog.text
    assert not backend.in_transaction(worker)
    row = backend.row(first)
    assert (row["status"], row["mensagem"], row["tenant"]) == ("sucesso", "ok", 99)
    assert backend.row(second)["status"] == "pendente"
    assert backend.liveness_lock_holder(first) is None
    assert backend.liveness_lock_holder(second) is None
    assert store.claim(worker).task.id == second  # the connection claims normally afterwards


def test_a_deadlock_in_the_claim_after_the_completion_claims_again(backend, store, worker):
    first, second = backend.enqueue({"prioridade": 90}, {"prioridade": 10})
    with explode_on_claim(backend):
        claim_then_handle(backend, store, worker, first)
        set_variable(worker, "nsjq_test_explode", 1213)
        claimed = store.complete_and_claim(worker, first, "ok", claim_next=True)
        store.rollback(worker)  # the trigger goes: the table must be free
    # The finished task's work was committed before the claim; only the claim was tried again.
    assert claimed.task.id == second
    row = backend.row(first)
    assert (row["status"], row["tenant"]) == ("sucesso", 99)
    assert backend.row(second)["status"] == PROCESSANDO
    assert backend.liveness_lock_holder(first) is None
    assert backend.liveness_lock_holder(second) == worker.thread_id()
    assert failures(backend) == 0


def test_a_failed_completion_after_an_earlier_one_is_not_taken_for_committed(
    backend, store, worker
):
    """@nsjq_completed still names the task an earlier CALL completed: the failed one is another."""
    first, second, third = backend.enqueue(
        {"prioridade": 90}, {"prioridade": 50}, {"prioridade": 10}
    )
    failing_completion = (
        "IF NEW.status = 'sucesso' AND @nsjq_test_fail_completion IS NOT NULL THEN "
        f"SET @nsjq_test_fail_completion = NULL; {DEADLOCK}; END IF;"
    )
    with trigger(backend, failing_completion):
        assert store.claim(worker).task.id == first
        assert store.complete_and_claim(worker, first, "ok", claim_next=True).task.id == second
        execute(worker, f"UPDATE {backend.table} SET tenant = 99 WHERE id = %s", (second,))
        set_variable(worker, "nsjq_test_fail_completion", 1)
        claimed = store.complete_and_claim(worker, second, "ok", claim_next=True)
        store.rollback(worker)  # the trigger goes: the table must be free
    # Settled as a lost completion: the handler's work is undone and the task runs again.
    assert claimed.task.id == second
    row = backend.row(second)
    assert (row["status"], row["tenant"]) == (PROCESSANDO, None)
    assert backend.row(third)["status"] == "pendente"
    assert backend.liveness_lock_holder(second) == worker.thread_id()


def test_a_claim_failing_again_after_a_deadlock_keeps_the_finished_task_done(
    backend, store, worker, caplog
):
    """The claim after a committed completion deadlocks, and so does its retry: no error."""
    first, second = backend.enqueue({"prioridade": 90}, {"prioridade": 10})
    twice = (
        "IF NEW.status = 'processando' AND @nsjq_test_failures > 0 THEN "
        "SET @nsjq_test_failures = @nsjq_test_failures - 1; "
        f"IF @nsjq_test_failures > 0 THEN {DEADLOCK}; END IF; "
        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the claim exploded again (test)'; END IF;"
    )
    with trigger(backend, twice):
        assert store.claim(worker).task.id == first
        set_variable(worker, "nsjq_test_failures", 2)  # a deadlock, then a plain error
        assert store.complete_and_claim(worker, first, "ok", claim_next=True) is None
    assert "claiming the next task failed" in caplog.text and "exploded again" in caplog.text
    assert not backend.in_transaction(worker)
    assert backend.row(first)["status"] == "sucesso"
    assert backend.row(second)["status"] == "pendente"
    assert backend.liveness_lock_holder(second) is None
    assert failures(backend) == 0


def test_the_release_after_a_failed_call_frees_the_lock_its_claim_took_and_no_other(
    backend, store, worker
):
    first, second = backend.enqueue({"prioridade": 90}, {"prioridade": 10})
    other = backend.worker()
    assert (store.claim(worker).task.id, store.claim(other).task.id) == (first, second)
    set_variable(worker, "nsjq_claimed", second)  # another session's lock
    store._release_claimed_lock(worker)
    assert backend.liveness_lock_holder(second) == other.thread_id()
    set_variable(worker, "nsjq_claimed", first)
    store._release_claimed_lock(worker)
    assert backend.liveness_lock_holder(first) is None


@pytest.mark.parametrize(
    ("decoder", "claim"),
    [
        ("claims_from_batch_document", lambda store, conn: store.claim_many(conn, 10)),
        ("claims_from_task_rows", lambda store, conn: store.claim_many(conn, 10)),
        ("task_from_json", lambda store, conn: store.claim(conn)),
    ],
    ids=["batch", "batch-read-again", "single"],
)
def test_a_claim_its_worker_cannot_decode_leaves_its_tasks_to_the_retry_service(
    backend, store, worker, monkeypatch, decoder, claim
):
    """The CALL committed the claims, then decoding its rows failed (a bug of ours): no
    handler will run those tasks, so their liveness locks go at once and the retry service
    sees them as orphans, as after a crash, though the worker's connection stays open."""
    ids = backend.enqueue({"prioridade": 50}, {"prioridade": 40})
    expected = ids[:1] if decoder == "task_from_json" else ids
    if decoder == "claims_from_task_rows":  # a later attempt: the rows are read again
        backend.execute(
            f"UPDATE {backend.table} SET id_inicial = %s, payload = NULL WHERE id = %s", ids
        )

    def broken(*args, **kwargs):
        raise ValueError("decoder bug (test)")

    monkeypatch.setattr(f"nsj_queue_lib.db.mysql.store.{decoder}", broken)
    with pytest.raises(ValueError, match="decoder bug"):
        claim(store, worker)
    assert backend.count("status = 'processando'") == len(expected)
    assert {backend.liveness_lock_holder(i) for i in ids} == {None}
    rescuer = backend.worker(executor=False)
    store.begin(rescuer)
    assert sorted(t.id for t in store.find_orphans(rescuer, 10, True)) == expected
    store.rollback(rescuer)
    monkeypatch.undo()
    worker.rollback()
    rest = [i for i in ids if i not in expected]  # the connection claims normally after
    assert [c.task.id for c in store.claim_many(worker, 10)] == rest


def test_null_priorities_are_claimed_last(backend, store, worker):
    """Rows written by hand may lack a priority: after every other band."""
    no_priority = backend.enqueue(data_hora=datetime.datetime(2020, 1, 1, tzinfo=UTC))
    backend.execute(f"UPDATE {backend.table} SET prioridade = NULL WHERE id = %s", (no_priority,))
    low, high = backend.enqueue({"prioridade": 0}, {"prioridade": 90})
    order = [store.claim(worker).task.id]
    while (claimed := store.complete_and_claim(worker, order[-1], "ok", True)) is not None:
        order.append(claimed.task.id)
    assert order == [high, low, no_priority]


# -- where a claim starts reading (the procedure's position) --------------------------------

POSITION_SECONDS = 0.02  # how long a claim procedure's look-up is reused (claim_procedure.sql)


def test_a_task_that_becomes_ready_ahead_is_claimed_once_the_look_up_is_older_than_20_ms(
    backend, store, worker
):
    """Claims start at the session's last claim for 20 ms after a look-up, then look anew."""
    first, second = backend.enqueue({"prioridade": 50}, {"prioridade": 50})
    assert store.claim(worker).task.id == first
    urgent = backend.enqueue(prioridade=90)
    time.sleep(POSITION_SECONDS * 1.5)
    assert store.complete_and_claim(worker, first, "ok", True).task.id == urgent
    assert store.complete_and_claim(worker, urgent, "ok", True).task.id == second


def test_a_claim_finding_nothing_after_its_position_looks_up_at_once(backend, store, worker):
    """Nothing is ready after the last claim, but a task became ready ahead of it: claimed."""
    first = backend.enqueue(prioridade=50)
    assert store.claim(worker).task.id == first
    urgent = backend.enqueue(prioridade=90)
    assert store.complete_and_claim(worker, first, "ok", True).task.id == urgent
    assert store.complete_and_claim(worker, urgent, "ok", True) is None


def test_a_position_is_used_only_by_claims_of_its_own_queue(backend, store, worker, conn):
    """One session claiming from two queues: the position of one never steers the other's claim."""
    with backend.other_namespace() as other:
        client = backend.client(conn, other.table)
        high, _low = (client.insert_task(**dict(TASK, prioridade=p)) for p in (90, 10))
        conn.commit()
        other_store = backend.new_store(other.table)
        other_store.bind(worker)
        first = backend.enqueue(prioridade=50)
        # This queue's claim leaves the position (50, ...); in the other it lies between both.
        assert store.claim(worker).task.id == first
        store.rollback(worker)
        store.unlock_task(worker, first)
        assert other_store.claim(worker).task.id == high
        other_store.rollback(worker)
        other_store.unlock_task(worker, high)


def innodb_lock_requests(backend) -> int:
    backend.execute("SET GLOBAL innodb_monitor_enable = 'lock_rec_lock_requests'")
    return int(
        backend.value(
            "SELECT `count` FROM information_schema.innodb_metrics "
            "WHERE name = 'lock_rec_lock_requests'"
        )
    )


@pytest.mark.fresh_queue  # counts lock requests on index entries, delete-marked ones too
def test_the_claim_passes_entries_of_claimed_tasks_without_locking_them(backend, store, worker):
    """Claimed tasks leave delete-marked claim index entries until purge: never locked one by one."""
    claimed = 250
    backend.enqueue(*[dict(chave_externa=str(n)) for n in range(claimed + 10)])
    snapshot = backend.worker()  # an open snapshot holds purge back
    execute(snapshot, "START TRANSACTION WITH CONSISTENT SNAPSHOT")
    value(snapshot, f"SELECT count(*) FROM {backend.table}")
    order = [store.claim(worker).task.id]
    while len(order) < claimed:
        order.append(store.complete_and_claim(worker, order[-1], "ok", True).task.id)
    # A locking read from the start of the 'pendente' range still meets every one of those entries.
    backend.execute("BEGIN")
    before = innodb_lock_requests(backend)
    backend.value(
        f"SELECT id FROM {backend.table} WHERE status = 'pendente' "
        "ORDER BY prioridade DESC, data_hora, id LIMIT 1 FOR UPDATE SKIP LOCKED"
    )
    head_scan = innodb_lock_requests(backend) - before
    backend.execute("ROLLBACK")
    assert head_scan >= claimed
    # The counter is server-wide: other sessions (parallel tests) only add to it, so the
    # fewest requests of a few claims is the procedure's own count. Its bound is far
    # below the entries a head scan meets; a busy suite once put 35 into all five of five.
    bound = claimed // 5
    counts = []
    for _ in range(10):
        before = innodb_lock_requests(backend)
        claimed_next = store.complete_and_claim(worker, order[-1], "ok", True)
        counts.append(innodb_lock_requests(backend) - before)
        assert claimed_next.task.id == order[-1] + 1
        order.append(claimed_next.task.id)
        if counts[-1] < bound:
            break
    assert min(counts) < bound, (counts, head_scan)


def test_without_the_claim_index_the_claim_still_claims_in_repeatable_read(
    backend, store, worker, conn
):
    """The look-up names the claim index: without it, it fails, and the claim reads from the
    start, lock included; READ UNCOMMITTED stays with the look-up."""
    first, second = backend.enqueue({"prioridade": 90}, {"prioridade": 10})
    store.claim(worker)
    store.commit(worker)  # the handler's transaction ends: nothing holds the table
    backend.execute(f"DROP INDEX {backend.queue.claim_index} ON {backend.table}")
    store.begin(worker)
    claimed = store.complete_and_claim(worker, first, "ok", True)
    assert (claimed.task.id, claimed.liveness_locked) == (second, True)
    assert backend.liveness_lock_holder(second) == worker.thread_id()
    backend.client(conn).insert_task(**TASK)  # uncommitted: READ UNCOMMITTED would see it
    assert value(worker, f"SELECT count(*) FROM {backend.table}") == 2
    conn.rollback()


def test_a_queue_in_a_latin1_database_keeps_every_character(backend, conn):
    """The procedure's parameters and variables take the database's character set unless told."""
    database = f"nsjq_l1_{uuid.uuid4().hex[:8]}"
    backend.execute(f"CREATE DATABASE {database} CHARACTER SET latin1")
    try:
        queue = mysql_helpers.create_queue(backend.admin, database)
        payload, mensagem = "payload: ação 日本 😀", "mensagem: ação 日本 😀"
        backend.client(conn, queue.table).insert_task("erp", "fiscal", "p", "k", payload)
        conn.commit()
        store = backend.new_store(queue.table)
        worker = backend.worker()
        store.bind(worker)
        task = store.claim(worker).task
        assert task.payload == payload
        assert store.complete_and_claim(worker, task.id, mensagem, True) is None
        assert backend.value(f"SELECT mensagem FROM {queue.table}") == mensagem
    finally:
        backend.execute(f"DROP DATABASE {database}")


# -- lock errors while completing: retried, never a task failure ------------------------------


@pytest.mark.parametrize("claim_next", [False, True])
def test_a_lock_wait_timeout_while_completing_is_retried(backend, store, worker, claim_next):
    task_id = backend.enqueue()
    store.claim(worker)
    execute(worker, "SET SESSION innodb_lock_wait_timeout = 1")
    blocker = backend.client_conn()
    execute(blocker, f"SELECT id FROM {backend.table} WHERE id = %s FOR UPDATE", (task_id,))
    releaser = threading.Timer(1.5, blocker.commit)
    releaser.start()
    started = time.monotonic()
    assert store.complete_and_claim(worker, task_id, "ok", claim_next) is None
    assert time.monotonic() - started >= 1  # it did wait and time out at least once
    releaser.join()
    assert backend.row(task_id)["status"] == "sucesso"
    assert backend.liveness_lock_holder(task_id) is None


@pytest.mark.parametrize("claim_next", [False, True])
def test_a_deadlock_while_completing_puts_the_task_back(backend, store, worker, claim_next, caplog):
    """The handler's transaction is the deadlock's victim when it completes: its work is gone,
    so the task goes back to 'pendente' to run again; no failure is recorded."""
    task_id, other_id = backend.enqueue({"prioridade": 90}, {"prioridade": 1})
    backend.set_status("sucesso", other_id)  # keep the second row out of the claim
    store.claim(worker)
    # The handler's work: it locks the other row.
    other, task = backend.where_id(other_id), backend.where_id(task_id)
    execute(worker, f"UPDATE {backend.table} SET mensagem = 'handler' WHERE {other}")
    rival = backend.client_conn()
    # A heavier transaction (more rows changed), so InnoDB picks the handler as the victim.
    execute(rival, f"UPDATE {backend.table} SET mensagem = 'rival' WHERE {task}")
    execute(
        rival,
        f"INSERT INTO {backend.table} (processo, status) VALUES "
        + ", ".join(["('filler', 'sucesso')"] * 50),
    )
    errors: list[BaseException] = []

    def rival_waits() -> None:
        try:
            execute(rival, f"UPDATE {backend.table} SET mensagem = 'rival' WHERE {other}")
            rival.commit()
        except BaseException as exc:  # the test asserts none were collected
            errors.append(exc)

    thread = threading.Thread(target=rival_waits)
    thread.start()
    time.sleep(0.5)  # the rival now waits for the handler's row lock
    claimed = store.complete_and_claim(worker, task_id, "ok", claim_next)
    thread.join(30)
    assert not errors, errors
    assert "Deadlock" in caplog.text  # the 1213 path was taken
    if claim_next:  # claimed again at once, by the same worker
        assert claimed.task.id == task_id and backend.row(task_id)["status"] == PROCESSANDO
        store.rollback(worker)
        store.unlock_task(worker, task_id)
    else:
        assert claimed is None and backend.row(task_id)["status"] == "pendente"
    assert backend.row(other_id)["mensagem"] == "rival"  # the handler's work is gone
    assert backend.liveness_lock_holder(task_id) is None
    assert failures(backend) == 0


def test_complete_if_running_after_a_deadlock_gives_the_task_back(backend, store, worker):
    """The socket-server path settles in the handler's transaction: a deadlock there loses it."""
    task_id = backend.enqueue()
    with trigger(backend, f"IF NEW.status = 'sucesso' THEN {DEADLOCK}; END IF;"):
        assert backend.claim(worker).id == task_id
        assert store.complete_if_running(worker, task_id, "ok") is False
    assert not backend.in_transaction(worker)
    assert backend.row(task_id)["status"] == "pendente"  # only a task still ours goes back
    assert backend.liveness_lock_holder(task_id) == worker.thread_id()  # the caller's to release


# -- one CALL, one result set ------------------------------------------------------------------


@pytest.fixture
def procedure(backend):
    """A procedure that inserts a row, returns the table, then fails when told to (after its
    result set)."""
    table = f"{backend.queue.name}_proc_rows"
    backend.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(200)) ENGINE=InnoDB")
    backend.execute(
        f"""
        CREATE PROCEDURE {table}_proc(IN p_id INT, IN p_v VARCHAR(200), IN p_fail BOOLEAN)
        BEGIN
            INSERT INTO {table} (id, v) VALUES (p_id, p_v);
            SELECT id, v FROM {table} ORDER BY id;
            IF p_fail THEN
                SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'failed after its result set (test)';
            END IF;
        END"""
    )
    try:
        yield f"CALL {table}_proc(%(id)s, %(v)s, %(fail)s)", table
    finally:
        backend.execute(f"DROP PROCEDURE IF EXISTS {table}_proc")
        backend.execute(f"DROP TABLE IF EXISTS {table}")


def test_call_procedure_returns_its_result_set_and_leaves_the_connection_usable(worker, procedure):
    call, table = procedure
    hostile = "x'); DROP TABLE nothing; -- ; \\' \" %s %(v)s"
    result = call_procedure(worker, (call, {"id": 1, "v": hostile, "fail": False}))
    assert result.names == ("id", "v") and result.rows == ((1, hostile),)
    assert value(worker, f"SELECT count(*) FROM {table}") == 1  # nothing left unread


def test_call_procedure_reports_a_failure_after_the_result_set(worker, procedure):
    call, table = procedure
    with pytest.raises(StatementFailed) as info:
        call_procedure(worker, (call, {"id": 2, "v": "a", "fail": True}))
    assert "failed after its result set" in str(info.value.error)
    assert info.value.__cause__ is info.value.error
    assert value(worker, f"SELECT id FROM {table}") == 2  # autocommit: the insert before it stays


# -- inserts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["mariadb", "mysql", "singlestore"])
def test_ids_are_read_back_on_every_server(backend, client, conn, monkeypatch, flavour):
    """RETURNING (MariaDB), LAST_INSERT_ID + consecutive ids (MySQL 8), one row per INSERT
    (SingleStore): the ids in the caller's order whichever the server."""
    increment = value(conn, "SELECT @@auto_increment_increment")
    monkeypatch.setattr(MysqlQueueStore, "server", lambda self, c: ServerInfo(flavour, increment))
    singles = [client.insert_task(**dict(TASK, chave_externa=f"s{n}")) for n in range(3)]
    count = 300
    marker = mysql_helpers.questions(conn)
    ids = client.insert_tasks([dict(TASK, chave_externa=str(n)) for n in range(count)])
    sent = mysql_helpers.questions(conn) - marker - 1  # the second count counts itself
    assert sent == (count if flavour == "singlestore" else 1)
    conn.commit()
    assert len(set(singles + ids)) == count + 3
    keys = {row["id"]: row["chave_externa"] for row in backend.rows()}
    assert [keys[i] for i in singles + ids] == ["s0", "s1", "s2"] + [str(n) for n in range(count)]


def test_insert_tasks_beyond_one_statement_keeps_the_order(backend, client, conn, monkeypatch):
    monkeypatch.setattr(mysql_rows, "INSERT_BATCH_BYTES", 2_000)
    tasks = [dict(TASK, chave_externa=str(n), payload="p" * 300) for n in range(40)]
    marker = mysql_helpers.questions(conn)
    ids = client.insert_tasks(tasks)
    assert mysql_helpers.questions(conn) - marker - 1 > 1  # split into several statements
    conn.commit()
    assert [backend.row(i)["chave_externa"] for i in ids] == [str(n) for n in range(40)]


def test_data_hora_outside_the_timestamp_range_is_refused(client):
    far = datetime.datetime(2040, 1, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="2038"):
        client.insert_task(**TASK, data_hora=far)
    with pytest.raises(DatabaseError):  # naive: the server refuses it (strict mode)
        client.insert_task(**TASK, data_hora=far.replace(tzinfo=None))


# -- batch claims (group commit: @nsjq_claim_limit) ------------------------------------------


def test_a_batch_claim_takes_ready_tasks_in_claim_order_in_one_commit(backend, store, worker):
    low, high, keyed, same_key, _later = backend.enqueue(
        {"prioridade": 10},
        {"prioridade": 90},
        {"prioridade": 50, "lock_key": "k"},
        {"prioridade": 40, "lock_key": "k"},  # waits for its key
        {"data_hora": datetime.datetime(2037, 1, 1, tzinfo=UTC)},
    )
    claims = store.claim_many(worker, 10)
    assert [c.task.id for c in claims] == [high, keyed, low]
    assert all(c.liveness_locked for c in claims)
    # Committed before any handler runs: another session sees them running.
    assert backend.count("status = 'processando'") == 3
    assert {backend.liveness_lock_holder(c.task.id) for c in claims} == {worker.thread_id()}
    assert value(worker, "SELECT @nsjq_claim_limit") is None  # one CALL only
    worker.rollback()
    assert store.claim_many(worker, 2) == []  # nothing else ready (same_key waits)
    assert backend.count("status = 'pendente'") == 2 and same_key


def test_a_batch_claim_of_ids_far_apart_keeps_claim_order_and_the_lock_results(
    backend, store, worker
):
    """The batch's row read has two forms: ids close together read a stretch of the primary
    key, ids far apart (here: tasks not yet due between them) are named in the statement.
    Both return the rows in claim order, with each liveness lock's result."""
    later = {"data_hora": datetime.datetime(2037, 1, 1, tzinfo=UTC)}
    low, *_not_due, high, middle = backend.enqueue(
        {"prioridade": 10}, *[later] * 10, {"prioridade": 90}, {"prioridade": 50}
    )
    elsewhere = backend.worker()
    backend.lock_elsewhere(elsewhere, middle)
    claims = store.claim_many(worker, 10)
    assert [(c.task.id, c.liveness_locked) for c in claims] == [
        (high, True),
        (middle, False),
        (low, True),
    ]
    worker.rollback()


@pytest.mark.parametrize("rows", ["as_read", "read_again"])
def test_a_batch_claims_tasks_as_the_rows_a_plain_select_reads(
    backend, store, worker, monkeypatch, rows
):
    """The set-based batch's rows: the same keys, order, values and types as get_task, a
    later attempt's payload its first's, and each task's liveness lock as GET_LOCK gave it.
    Two forms: as its locking read built them (dialect.CLAIMED_TASK_VALUES, one document),
    or read again after the commit (dialect.TASK_VALUES, a row each), when a later attempt
    needs its first's payload or a liveness lock was held elsewhere."""
    ids, at = enqueue_hostile_payloads(backend, null_boolean=True)
    decoded = {"claims_from_batch_document": 0, "claims_from_task_rows": 0}
    for name in decoded:
        monkeypatch.setattr(f"nsj_queue_lib.db.mysql.store.{name}", counted(decoded, name))
    if rows == "read_again":  # a worker of another version runs one: the lock alone tells
        backend.lock_elsewhere(backend.worker(), ids[1])
    # The later attempt comes last (priority 1): without it in the first batch, only the
    # lock held elsewhere makes its rows read again.
    claims = store.claim_many(worker, len(HOSTILE_PAYLOADS) - 1)
    as_read = int(rows == "as_read")
    assert decoded == {"claims_from_batch_document": as_read, "claims_from_task_rows": 1 - as_read}
    worker.commit()
    claims += store.claim_many(worker, 10)  # the later attempt: read again, for its payload
    assert decoded == {"claims_from_batch_document": as_read, "claims_from_task_rows": 2 - as_read}
    assert len(claims) == len(HOSTILE_PAYLOADS)
    reader = backend.worker(executor=False)  # autocommit, UTC like the worker's session
    for claim in claims:
        task = claim.task
        expected = backend.claimed_row(store, reader, task.id)
        assert task.row == expected and list(task.row) == list(expected)
        assert {k: type(v) for k, v in task.row.items()} == {
            k: type(v) for k, v in expected.items()
        }
        assert (task.id, task.payload, task.tentativa, task.dead) == (
            expected["id"],
            expected["payload"],
            expected["tentativa"],
            False,
        )
        assert claim.liveness_locked is (rows == "as_read" or task.id != ids[1])
        if task.tentativa == 2:
            assert task.payload == HOSTILE_PAYLOADS[0] and task.row["reenfileirado"] is True
            assert task.row["estouro_tentativas"] is None
        else:
            assert task.row["data_hora"] == at.astimezone(UTC).replace(tzinfo=None)
            assert isinstance(task.row["payload_hash"], bytes) or task.payload == ""


def test_a_batch_of_the_largest_size_is_claimed_as_read_in_claim_order(
    backend, store, worker, monkeypatch
):
    """QUEUE_BATCH_SIZE's bound on MySQL/MariaDB (settings.MAX_BATCH_SIZE): every task of a
    full batch claimed in one CALL, in claim order, as its locking read built them (in
    chunks of 32 KiB: here about 80 KiB in all)."""
    payloads = [f"{n:04d}" + "x" * 60 for n in range(MAX_BATCH_SIZE + 5)]
    ids = backend.enqueue(*({"prioridade": 50, "payload": p} for p in payloads))
    decoded = {"claims_from_batch_document": 0, "claims_from_task_rows": 0}
    for name in decoded:
        monkeypatch.setattr(f"nsj_queue_lib.db.mysql.store.{name}", counted(decoded, name))
    claims = store.claim_many(worker, MAX_BATCH_SIZE)
    assert decoded == {"claims_from_batch_document": 1, "claims_from_task_rows": 0}
    assert [(c.task.id, c.task.payload) for c in claims] == list(
        zip(ids[:MAX_BATCH_SIZE], payloads[:MAX_BATCH_SIZE], strict=True)
    )
    assert all(c.liveness_locked for c in claims)
    worker.commit()
    assert backend.count("status = 'processando'") == MAX_BATCH_SIZE


def test_a_batch_of_large_rows_is_read_again_row_by_row(backend, store, worker, monkeypatch):
    """Past about 128 KiB of text the locking read stops building the batch's rows (each
    append copies a chunk of up to 32 KiB): they are read again after the commit, one per
    task, none lost, and no text is left in the session."""
    payloads = [letter * 60_000 for letter in "abc"]
    ids = backend.enqueue(*({"payload": p, "prioridade": 50} for p in payloads))
    decoded = {"claims_from_batch_document": 0, "claims_from_task_rows": 0}
    for name in decoded:
        monkeypatch.setattr(f"nsj_queue_lib.db.mysql.store.{name}", counted(decoded, name))
    claims = store.claim_many(worker, 10)
    assert decoded == {"claims_from_batch_document": 0, "claims_from_task_rows": 1}
    assert [(c.task.id, c.task.payload, c.liveness_locked) for c in claims] == [
        (task_id, payload, True) for task_id, payload in zip(ids, payloads, strict=True)
    ]
    assert value(worker, "SELECT @nsjq_claimed_rows IS NULL AND @nsjq_claimed_chunk IS NULL")
    worker.commit()
    # Two of them stay within the bound: built by the locking read.
    more = backend.enqueue(*({"payload": p, "prioridade": 50} for p in payloads[:2]))
    assert [c.task.id for c in store.claim_many(worker, 10)] == more
    assert decoded == {"claims_from_batch_document": 1, "claims_from_task_rows": 1}
    worker.rollback()


def counted(calls: dict[str, int], name: str):
    """The store's decoder ``name``, its calls counted in ``calls``."""
    decoder = getattr(mysql_store, name)

    def decode(*args, **kwargs):
        calls[name] += 1
        return decoder(*args, **kwargs)

    return decode


def test_a_batch_claim_that_meets_a_running_key_claims_one_by_one_instead(backend, store, worker):
    """The set-based batch's UPDATE meets the unique index of running keys (another session
    took the key after the batch's read): the batch is undone and claimed one task at a
    time, which skips the busy key."""
    first, keyed, last = backend.enqueue(
        {"prioridade": 90}, {"prioridade": 50, "lock_key": "k"}, {"prioridade": 10}
    )
    other = backend.client_conn()  # holds key k running, not yet committed
    execute(
        other,
        f"INSERT INTO {backend.table} (status, lock_key, data_hora) "
        "VALUES ('processando', 'k', '2037-01-01')",
    )
    result: dict = {}

    def claim() -> None:
        try:
            result["claims"] = store.claim_many(worker, 10)
        except BaseException as exc:  # the test thread asserts on it
            result["error"] = exc

    thread = threading.Thread(target=claim)
    thread.start()
    # The batch's UPDATE has read its rows (with the key free in its snapshot) and waits for
    # the uncommitted key, or meets it committed: server-side state, no sleep.
    deadline = time.monotonic() + 20
    while not value(
        other,
        "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = %s AND INFO LIKE %s",
        (worker.thread_id(), "UPDATE%processando%"),
    ):
        assert time.monotonic() < deadline, "the batch claim never reached its UPDATE"
        time.sleep(0.01)
    other.commit()
    thread.join(20)
    assert "error" not in result, result.get("error")
    claims = result["claims"]
    assert [c.task.id for c in claims] == [first, last]
    assert all(c.liveness_locked for c in claims)
    reader = backend.worker(executor=False)  # their rows as a plain SELECT reads them
    assert [c.task.row for c in claims] == [
        backend.claimed_row(store, reader, c.task.id) for c in claims
    ]
    assert backend.liveness_lock_holder(keyed) is None  # the undone batch's lock released
    worker.commit()
    assert backend.count("status = 'pendente'") == 1


def test_a_batch_claim_stops_at_its_limit_and_a_failed_one_gives_everything_back(
    backend, store, worker
):
    ids = backend.enqueue(*({"prioridade": 50} for _ in range(4)))
    assert [c.task.id for c in store.claim_many(worker, 2)] == ids[:2]
    worker.commit()
    # The batch's second claim fails, after its first took a row and a lock.
    with trigger(
        backend,
        "IF NEW.status = 'processando' AND @nsjq_test_countdown IS NOT NULL THEN "
        "SET @nsjq_test_countdown = @nsjq_test_countdown - 1; "
        "IF @nsjq_test_countdown = 0 THEN SET @nsjq_test_countdown = NULL; "
        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the claim exploded (test)'; END IF; "
        "END IF;",
    ):
        set_variable(worker, "nsjq_test_countdown", 2)
        with pytest.raises(DatabaseError, match="exploded"):
            store.claim_many(worker, 5)
    assert backend.count("status = 'pendente'") == 2
    assert {backend.liveness_lock_holder(i) for i in ids[2:]} == {None}


def _insert_waits(backend, holder_calls) -> list[str]:
    """The client calls among ``holder_calls`` (name -> call on a client) whose open
    transaction makes another session's insert_task wait for a lock."""
    waited = []
    for name, call in holder_calls.items():
        holder_conn, inserter_conn = backend.client_conn(), backend.client_conn()
        call(backend.client(holder_conn))
        with inserter_conn.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
        try:
            backend.client(inserter_conn).insert_task(**TASK)
            inserter_conn.commit()
        except Exception:
            inserter_conn.rollback()
            waited.append(name)
        holder_conn.rollback()
    return waited


def test_a_clients_open_transaction_by_task_id_holds_up_no_insert(backend):
    """A caller's transaction left open after a statement by task id holds no gap where
    inserts go: not the id_inicial index's (a locking search for the task's latest
    attempt), nor on the partitioned layout the hot partition's (``id`` alone is not
    its key). The task is the newest, whose gaps are where the next insert goes."""

    def newest() -> int:
        return backend.enqueue()

    def finished() -> int:
        task_id = backend.enqueue()
        backend.set_status(model.SUCESSO, task_id)
        return task_id

    waited = _insert_waits(
        backend,
        {
            "cancel_task": lambda client: client.cancel_task(newest()),
            "send_event": lambda client: client.send_event(newest(), "ping"),
            "get_task": lambda client: client.get_task(newest()),
            "cancel_finished": lambda client: client.cancel_task(finished()),
            "insert_after": lambda client: client.insert_task(**TASK, after=[newest()]),
            "workflow": lambda client: two_step_workflow().enqueue(client),
            # A handler's durable step locks its own attempt before the checkpoint.
            "step_fence": lambda client: checkpoints_of(client._store, backend.table).owns(
                client._conn, newest()
            ),
        },
    )
    assert waited == []


def two_step_workflow() -> Workflow:
    workflow = Workflow("pair")
    workflow.add("emitir_nota", "b", after=[workflow.add("emitir_nota", "a")])
    return workflow


@pytest.mark.parametrize("change", ["retried", "succeeded"])
def test_a_cancel_sees_what_changed_after_the_callers_snapshot(backend, store, worker, change):
    """The lock of a task's latest attempt starts from the caller's snapshot and falls back
    to the searching locking reads when the row's latest version says a newer attempt
    exists, or when the row moved to its day's partition meanwhile."""
    task_id = backend.enqueue()
    conn = backend.client_conn()
    client = backend.client(conn)
    assert client.get_task(task_id)["status"] == "pendente"  # the snapshot, REPEATABLE READ
    claimed = backend.claim(worker)
    if change == "retried":
        store.rollback(worker)
        store.begin(worker)
        newer = store.fail_and_retry(worker, claimed.id, model.FALHA, "boom", 60.0)
        store.commit(worker)
        assert client.cancel_task(task_id) == model.CANCELADA
    else:
        assert store.complete_if_running(worker, claimed.id, "ok")
        store.commit(worker)
        assert client.cancel_task(task_id) == model.SUCESSO
    conn.commit()
    latest = newer if change == "retried" else task_id
    expected = model.CANCELADA if change == "retried" else model.SUCESSO
    assert backend.row(latest)["status"] == expected
