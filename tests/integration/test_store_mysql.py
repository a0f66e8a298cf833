"""The MySQL and SingleStore stores' runtime operations on a real MariaDB, called directly.

Worker connections are autocommit and configured as the runtime configures
its executors' (``configure_executor_connection``); the store opens and ends transactions.
The SingleStore store is exercised on MariaDB too (SingleStore cannot run
here): its claim path only uses SQL that MariaDB shares.
"""

from __future__ import annotations

import datetime
import threading
import time

import pytest
from pymysql.constants import CLIENT

from nsj_queue_lib import QueueClient, model
from nsj_queue_lib.db.dialect import claim_routine_name, get_dialect
from nsj_queue_lib.db.mysql.dialect import claim_procedure_version
from nsj_queue_lib.db.mysql.store import MysqlQueueStore, stable_queue_number
from nsj_queue_lib.db.singlestore.store import SingleStoreQueueStore
from nsj_queue_lib.exceptions import ConfigError, DatabaseError, QueueTableMissingError
from tests.helpers.databases import unique_queue_name
from tests.helpers.mysql_queue import (
    connect,
    create_queue,
    drop_queue_tables,
    fetch_dicts,
    fetch_value,
    in_transaction,
    questions,
    row_of,
)

pytestmark = pytest.mark.mysql

UTC = datetime.timezone.utc
TASK = dict(
    origem="erp", destino="fiscal", processo="emitir_nota", chave_externa="k", payload="texto"
)


@pytest.fixture(params=["claim procedure", "plain SQL"])
def store(request, mysql_queue, mysql_admin) -> MysqlQueueStore:
    """The store on a queue with its claim procedure (db_gen's DDL), and on one without (older DDL)."""
    if request.param == "plain SQL":
        admin_exec(mysql_admin, f"DROP PROCEDURE {claim_routine_name(mysql_queue.table)}")
    return get_dialect("mysql").store(mysql_queue.table, mysql_queue.subscriber_table)


@pytest.fixture
def enqueue(mysql_kwargs, mysql_queue):
    """Enqueue committed tasks through QueueClient; returns their ids."""
    conn = connect(mysql_kwargs)

    def insert(*tasks: dict, **task) -> list[int] | int:
        client = QueueClient(conn, mysql_queue.table, mysql_queue.subscriber_table)
        if tasks:
            ids = client.insert_tasks([dict(TASK, **t) for t in tasks])
            conn.commit()
            return ids
        task_id = client.insert_task(**dict(TASK, **task))
        conn.commit()
        return task_id

    try:
        yield insert
    finally:
        conn.close()


@pytest.fixture
def new_worker_conn(mysql_kwargs, mysql_queue, store):
    """More configured worker connections, closed before the queue is dropped."""
    opened = []

    def make():
        conn = connect(mysql_kwargs, autocommit=True)
        store.configure_executor_connection(conn)
        opened.append(conn)
        return conn

    try:
        yield make
    finally:
        for conn in opened:
            try:
                conn.close()
            except Exception:  # already killed by a test
                pass


def ago(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(UTC) - datetime.timedelta(seconds=seconds)


def admin_exec(admin, sql: str, args=None) -> int:
    with admin.cursor() as cur:
        return cur.execute(sql, args)


def lock_holder(admin, store, conn, task_id: int):
    return fetch_value(admin, "SELECT IS_USED_LOCK(%s)", (store.task_lock_name(conn, task_id),))


# -- configuration --------------------------------------------------------------


def test_executor_connections_are_repeatable_read_and_utc(mysql_worker_conn):
    assert fetch_value(mysql_worker_conn, "SELECT @@session.tx_isolation") == "REPEATABLE-READ"
    assert fetch_value(mysql_worker_conn, "SELECT @@session.time_zone") == "+00:00"


def test_service_connections_are_read_committed_and_utc(mysql_kwargs, mysql_queue):
    conn = connect(mysql_kwargs, autocommit=True)
    try:
        get_dialect("mysql").store(mysql_queue.table).configure_connection(conn)
        assert fetch_value(conn, "SELECT @@session.tx_isolation") == "READ-COMMITTED"
        assert fetch_value(conn, "SELECT @@session.time_zone") == "+00:00"
    finally:
        conn.close()


def test_queue_oid_is_a_stable_number(store, mysql_worker_conn, mysql_admin, mysql_queue):
    oid = store.queue_oid(mysql_worker_conn)
    assert oid == store.queue_oid(mysql_admin) == stable_queue_number(mysql_queue.table)
    assert 0 <= oid < 2**31
    unqualified = get_dialect("mysql").store(mysql_queue.name)  # the connection's database is used
    assert unqualified.queue_oid(mysql_worker_conn) == oid


def test_queue_oid_of_a_missing_table_fails(mysql_worker_conn, mysql_queue):
    with pytest.raises(QueueTableMissingError, match="does not exist"):
        get_dialect("mysql").store(f"{mysql_queue.table}_missing").queue_oid(mysql_worker_conn)


def test_lock_names_fit_and_name_the_queue(store, mysql_worker_conn, mysql_queue):
    name = store.task_lock_name(mysql_worker_conn, 2**63 - 1)
    assert len(name) <= 64 and name.startswith(f"nsjq:{mysql_queue.table}:")
    assert len(store.service_lock_name(mysql_worker_conn, -(2**63))) <= 64
    long_store = get_dialect("mysql").store(f"{mysql_queue.database}.{'q' * 63}")
    assert len(long_store.task_lock_name(mysql_worker_conn, 2**63 - 1)) <= 64
    # The name really works as a MySQL lock name.
    assert (
        fetch_value(
            mysql_worker_conn,
            "SELECT GET_LOCK(%s, 0)",
            (long_store.service_lock_name(mysql_worker_conn, -(2**63)),),
        )
        == 1
    )


# -- claim ----------------------------------------------------------------------


def test_claim_order_is_priority_then_data_hora(
    store, enqueue, mysql_worker_conn, mysql_admin, mysql_queue
):
    low = enqueue(prioridade=10, data_hora=ago(3))
    high_newer = enqueue(prioridade=90, data_hora=ago(1))
    high_older = enqueue(prioridade=90, data_hora=ago(2))
    default = enqueue(data_hora=ago(5))  # prioridade 50
    enqueue(prioridade=100, data_hora=ago(-3600))  # in the future: never claimed now
    scheduled = enqueue(prioridade=100, data_hora=ago(10))
    admin_exec(
        mysql_admin,
        f"UPDATE {mysql_queue.table} SET status = 'agendada' WHERE id = %s",
        (scheduled,),
    )

    tasks = store.claim(mysql_worker_conn, 10)
    assert [t["id"] for t in tasks] == [high_older, high_newer, default, low]
    assert all(t["status"] == "processando" and t["liveness_locked"] is True for t in tasks)
    assert all(t["pub_sub"] is False and t["dead"] is False for t in tasks)
    assert in_transaction(mysql_worker_conn)  # open for the first task's handler
    store.rollback(mysql_worker_conn)
    statuses = {
        r["id"]: r["status"]
        for r in fetch_dicts(mysql_admin, f"SELECT id, status FROM {mysql_queue.table}")
    }
    assert [statuses[i] for i in (low, high_newer, high_older, default)] == ["processando"] * 4
    assert list(statuses.values()).count("pendente") == 1 and statuses[scheduled] == "agendada"
    assert store.claim(mysql_worker_conn, 10) == []
    assert not in_transaction(mysql_worker_conn)  # nothing claimed: idle


def test_claim_respects_the_limit(store, enqueue, mysql_worker_conn):
    enqueue(*[dict(chave_externa=str(n)) for n in range(5)])
    assert len(store.claim(mysql_worker_conn, 2)) == 2
    store.commit(mysql_worker_conn)
    assert len(store.claim(mysql_worker_conn, 10)) == 3
    store.commit(mysql_worker_conn)
    assert store.claim(mysql_worker_conn, 0) == []


def test_a_future_task_is_not_claimed_until_its_time(store, enqueue, mysql_worker_conn):
    task_id = enqueue(data_hora=ago(-1.5))
    assert store.claim(mysql_worker_conn, 1) == []
    seconds = store.seconds_until_next_due(mysql_worker_conn)
    assert 0 < seconds <= 1.5
    time.sleep(seconds + 0.05)
    assert [t["id"] for t in store.claim(mysql_worker_conn, 1)] == [task_id]


@pytest.mark.parametrize("limit", [1, 5])
@pytest.mark.parametrize(
    "hold",
    [
        "SELECT id FROM {table} WHERE id = %s FOR UPDATE",
        "UPDATE {table} SET mensagem = 'held' WHERE id = %s",
    ],
)
def test_claim_skips_rows_another_transaction_holds(
    hold, limit, store, enqueue, mysql_worker_conn, mysql_kwargs, mysql_queue
):
    """A row locked by id elsewhere (a handler's own statement, say) is passed, by the single-task claim too."""
    first, second = enqueue(dict(prioridade=90), dict(prioridade=10))
    other = connect(mysql_kwargs)
    try:
        with other.cursor() as cur:
            cur.execute(hold.format(table=mysql_queue.table), (first,))
        started = time.monotonic()
        assert [t["id"] for t in store.claim(mysql_worker_conn, limit)] == [second]
        assert time.monotonic() - started < 2  # no waiting
    finally:
        other.close()


def test_claim_takes_the_liveness_lock_on_the_running_connection(
    store, enqueue, mysql_worker_conn, mysql_worker_conn_2, mysql_admin
):
    task_id = enqueue()
    (task,) = store.claim(mysql_worker_conn, 1)
    # Visible from any other connection, held by the connection that runs the task.
    assert (
        lock_holder(mysql_admin, store, mysql_worker_conn, task_id) == mysql_worker_conn.thread_id()
    )
    assert (
        fetch_value(
            mysql_worker_conn_2,
            "SELECT GET_LOCK(%s, 0)",
            (store.task_lock_name(mysql_worker_conn_2, task_id),),
        )
        == 0
    )
    assert (
        store.complete_and_claim(
            mysql_worker_conn, task_id, "feito", store.task_lock_keys(0, task_id), 0
        )
        == []
    )
    assert lock_holder(mysql_admin, store, mysql_worker_conn, task_id) is None
    assert not in_transaction(mysql_worker_conn)
    row = row_of(mysql_admin, store.queue_table, task_id)
    assert (row["status"], row["mensagem"]) == ("sucesso", "feito")


def test_complete_and_claim_commits_the_handlers_work_and_claims_the_next(
    store, enqueue, mysql_worker_conn, mysql_admin, mysql_queue
):
    first, second = enqueue(dict(prioridade=90), dict(prioridade=10))
    (task,) = store.claim(mysql_worker_conn, 1)
    assert task["id"] == first
    # The handler writes in the task's transaction.
    admin_exec(
        mysql_worker_conn, f"UPDATE {mysql_queue.table} SET tenant = 99 WHERE id = %s", (first,)
    )
    nxt = store.complete_and_claim(
        mysql_worker_conn, first, "ok", store.task_lock_keys(0, first), 1
    )
    assert [t["id"] for t in nxt] == [second]
    assert in_transaction(mysql_worker_conn)
    row = row_of(mysql_admin, mysql_queue.table, first)
    assert (row["status"], row["mensagem"], row["tenant"]) == ("sucesso", "ok", 99)
    assert lock_holder(mysql_admin, store, mysql_worker_conn, first) is None
    assert (
        lock_holder(mysql_admin, store, mysql_worker_conn, second) == mysql_worker_conn.thread_id()
    )


HOSTILE_PAYLOADS = [
    "quote ' double \" backslash \\ end",
    "lines\nand\ttabs\r and \x01 control",
    "unicode: ação 日本 😀",
    '{"json": ["inside", 1, null]}',
    "",
]


def test_a_single_task_claim_reads_the_row_as_a_plain_select_does(
    store, enqueue, mysql_worker_conn, mysql_worker_conn_2, mysql_admin, mysql_queue
):
    """Executors claim one task at a time, and that claim sends the row as JSON: same keys, values, types."""
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    ids = enqueue(
        *[
            dict(
                payload=p,
                chave_externa=f"h{n}",
                tenant=2**40 + n,
                grupo_empresarial="g",
                data_hora=at,
                prioridade=90 - n,
            )
            for n, p in enumerate(HOSTILE_PAYLOADS)
        ]
    )
    # A later attempt keeps no payload of its own: the claim resolves it from the first attempt.
    admin_exec(
        mysql_admin,
        f"INSERT INTO {mysql_queue.table} (id_inicial, processo, payload, payload_hash, "
        "tentativa, data_hora, prioridade, proxima_tentativa, reenfileirado) "
        "SELECT id, processo, NULL, payload_hash, 2, data_hora, 1, data_hora, 1 FROM "
        f"{mysql_queue.table} WHERE id = %s",
        (ids[0],),
    )
    admin_exec(
        mysql_admin, f"UPDATE {mysql_queue.table} SET status = 'sucesso' WHERE id = %s", (ids[0],)
    )
    claimed = store.claim(mysql_worker_conn, 1)
    while claimed:
        [task] = claimed
        assert task.pop("liveness_locked") is True
        expected = store.get_task(mysql_worker_conn_2, task["id"])
        assert task == expected
        assert list(task) == list(expected)  # the same column order too
        if task["id_inicial"] is None:
            assert task["data_hora"] == at.replace(tzinfo=None)
        else:
            assert task["payload"] == HOSTILE_PAYLOADS[0] and task["reenfileirado"] is True
        assert (
            isinstance(task["payload_hash"], bytes) or task["payload"] == ""
        )  # no hash of an empty payload
        assert isinstance(task["pub_sub"], bool)
        claimed = store.complete_and_claim(
            mysql_worker_conn, task["id"], "ok", store.task_lock_keys(0, task["id"]), 1
        )
    assert (
        fetch_value(
            mysql_admin, f"SELECT count(*) FROM {mysql_queue.table} WHERE status = 'sucesso'"
        )
        == 6
    )
    assert not in_transaction(mysql_worker_conn)


@pytest.fixture
def explode_on_claim(mysql_admin, mysql_queue):
    """A trigger failing the claim's mark step once, when the worker session sets @nsjq_test_explode.

    0 fails with a plain error, 1213 with a deadlock's error number. User
    variables are not transactional, so the trigger disarms itself.
    """
    name = f"{mysql_queue.name}_explode"
    admin_exec(
        mysql_admin,
        f"""
        CREATE TRIGGER {name} BEFORE UPDATE ON {mysql_queue.table} FOR EACH ROW
        BEGIN
            IF NEW.status = 'processando' AND @nsjq_test_explode IS NOT NULL THEN
                SET @nsjq_test_errno = @nsjq_test_explode, @nsjq_test_explode = NULL;
                IF @nsjq_test_errno = 1213 THEN
                    SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found (test)';
                ELSE
                    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the claim exploded (test)';
                END IF;
            END IF;
        END""",
    )

    def arm(conn, errno: int) -> None:
        admin_exec(conn, "SET @nsjq_test_explode = %s", (errno,))

    try:
        yield arm
    finally:
        admin_exec(mysql_admin, f"DROP TRIGGER IF EXISTS {name}")


def test_a_claim_failing_after_the_completion_keeps_the_finished_task_and_claims_nothing(
    store, enqueue, mysql_worker_conn, mysql_admin, mysql_queue, explode_on_claim, caplog
):
    """The completion commits before the claim: a failing claim is undone alone."""
    first, second = enqueue(dict(prioridade=90), dict(prioridade=10))
    store.claim(mysql_worker_conn, 1)
    admin_exec(
        mysql_worker_conn, f"UPDATE {mysql_queue.table} SET tenant = 99 WHERE id = %s", (first,)
    )
    explode_on_claim(mysql_worker_conn, 0)
    assert (
        store.complete_and_claim(mysql_worker_conn, first, "ok", store.task_lock_keys(0, first), 1)
        == []
    )
    assert "claiming the next task failed" in caplog.text and "exploded" in caplog.text
    assert not in_transaction(mysql_worker_conn)
    row = row_of(mysql_admin, mysql_queue.table, first)
    assert (row["status"], row["mensagem"], row["tenant"]) == ("sucesso", "ok", 99)
    assert lock_holder(mysql_admin, store, mysql_worker_conn, first) is None
    assert row_of(mysql_admin, mysql_queue.table, second)["status"] == "pendente"
    assert lock_holder(mysql_admin, store, mysql_worker_conn, second) is None
    # The connection claims normally afterwards.
    assert [t["id"] for t in store.claim(mysql_worker_conn, 1)] == [second]


def test_a_deadlock_in_the_claim_after_the_completion_claims_again(
    store, enqueue, mysql_worker_conn, mysql_admin, mysql_queue, explode_on_claim
):
    first, second = enqueue(dict(prioridade=90), dict(prioridade=10))
    store.claim(mysql_worker_conn, 1)
    admin_exec(
        mysql_worker_conn, f"UPDATE {mysql_queue.table} SET tenant = 99 WHERE id = %s", (first,)
    )
    explode_on_claim(mysql_worker_conn, 1213)
    nxt = store.complete_and_claim(
        mysql_worker_conn, first, "ok", store.task_lock_keys(0, first), 1
    )
    # The finished task's work was committed before the claim; only the claim was tried again.
    assert [t["id"] for t in nxt] == [second]
    row = row_of(mysql_admin, mysql_queue.table, first)
    assert (row["status"], row["tenant"]) == ("sucesso", 99)
    assert row_of(mysql_admin, mysql_queue.table, second)["status"] == "processando"
    assert lock_holder(mysql_admin, store, mysql_worker_conn, first) is None
    assert (
        lock_holder(mysql_admin, store, mysql_worker_conn, second) == mysql_worker_conn.thread_id()
    )
    assert (
        fetch_value(
            mysql_admin, f"SELECT count(*) FROM {mysql_queue.table} WHERE status LIKE 'falha%%'"
        )
        == 0
    )


def test_a_failed_completion_after_an_earlier_one_on_the_connection_is_not_taken_for_committed(
    store, enqueue, mysql_worker_conn, mysql_admin, mysql_queue
):
    """@nsjq_completed still names the task an earlier CALL completed: the failed one is another."""
    first, second, third = enqueue(dict(prioridade=90), dict(prioridade=50), dict(prioridade=10))
    store.claim(mysql_worker_conn, 1)
    [task] = store.complete_and_claim(
        mysql_worker_conn, first, "ok", store.task_lock_keys(0, first), 1
    )
    assert task["id"] == second
    name = f"{mysql_queue.name}_fail_completion"
    admin_exec(
        mysql_admin,
        f"""
        CREATE TRIGGER {name} BEFORE UPDATE ON {mysql_queue.table} FOR EACH ROW
        BEGIN
            IF NEW.status = 'sucesso' AND @nsjq_test_fail_completion IS NOT NULL THEN
                SET @nsjq_test_fail_completion = NULL;
                SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found (test)';
            END IF;
        END""",
    )
    try:
        admin_exec(
            mysql_worker_conn,
            f"UPDATE {mysql_queue.table} SET tenant = 99 WHERE id = %s",
            (second,),
        )
        admin_exec(mysql_worker_conn, "SET @nsjq_test_fail_completion = 1")
        nxt = store.complete_and_claim(
            mysql_worker_conn, second, "ok", store.task_lock_keys(0, second), 1
        )
    finally:
        admin_exec(mysql_admin, f"DROP TRIGGER IF EXISTS {name}")
    # Settled as a lost completion: the handler's work is undone and the task runs again.
    assert [t["id"] for t in nxt] == [second]
    row = row_of(mysql_admin, mysql_queue.table, second)
    assert (row["status"], row["tenant"]) == ("processando", None)
    assert row_of(mysql_admin, mysql_queue.table, third)["status"] == "pendente"
    assert (
        lock_holder(mysql_admin, store, mysql_worker_conn, second) == mysql_worker_conn.thread_id()
    )


def test_a_claim_failing_again_after_a_deadlock_keeps_the_finished_task_done(
    store, enqueue, mysql_worker_conn, mysql_admin, mysql_queue, caplog
):
    """The claim after a committed completion deadlocks, and so does its retry: the task stays done, no error."""
    first, second = enqueue(dict(prioridade=90), dict(prioridade=10))
    name = f"{mysql_queue.name}_fail_claims"
    admin_exec(
        mysql_admin,
        f"""
        CREATE TRIGGER {name} BEFORE UPDATE ON {mysql_queue.table} FOR EACH ROW
        BEGIN
            IF NEW.status = 'processando' AND @nsjq_test_failures > 0 THEN
                SET @nsjq_test_failures = @nsjq_test_failures - 1;
                IF @nsjq_test_failures > 0 THEN
                    SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found (test)';
                END IF;
                SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the claim exploded again (test)';
            END IF;
        END""",
    )
    try:
        store.claim(mysql_worker_conn, 1)
        admin_exec(
            mysql_worker_conn, "SET @nsjq_test_failures = 2"
        )  # a deadlock, then a plain error
        assert (
            store.complete_and_claim(
                mysql_worker_conn, first, "ok", store.task_lock_keys(0, first), 1
            )
            == []
        )
    finally:
        admin_exec(mysql_admin, f"DROP TRIGGER IF EXISTS {name}")
    assert "claiming the next task failed" in caplog.text and "exploded again" in caplog.text
    assert not in_transaction(mysql_worker_conn)
    assert row_of(mysql_admin, mysql_queue.table, first)["status"] == "sucesso"
    assert row_of(mysql_admin, mysql_queue.table, second)["status"] == "pendente"
    assert lock_holder(mysql_admin, store, mysql_worker_conn, second) is None
    assert (
        fetch_value(
            mysql_admin, f"SELECT count(*) FROM {mysql_queue.table} WHERE status LIKE 'falha%%'"
        )
        == 0
    )


def test_the_single_claims_release_step_frees_the_lock_it_took_and_no_other(
    store, enqueue, mysql_worker_conn, mysql_worker_conn_2, mysql_admin
):
    """What a failed batch runs when its lock step may have locked the claimed task."""
    first, second = enqueue(dict(prioridade=90), dict(prioridade=10))
    [task] = store.claim(mysql_worker_conn, 1)
    [other] = store.claim(mysql_worker_conn_2, 1)
    assert (task["id"], other["id"]) == (first, second)
    admin_exec(mysql_worker_conn, "SET @nsjq_claimed = %s", (second,))  # another session's lock
    store._release_single_claim_lock(mysql_worker_conn)
    assert lock_holder(mysql_admin, store, mysql_admin, second) == mysql_worker_conn_2.thread_id()
    admin_exec(mysql_worker_conn, "SET @nsjq_claimed = %s", (first,))
    store._release_single_claim_lock(mysql_worker_conn)
    assert lock_holder(mysql_admin, store, mysql_admin, first) is None


def test_a_first_claim_failing_leaves_no_lock_and_no_claim(
    store, enqueue, mysql_worker_conn, mysql_admin, mysql_queue, explode_on_claim
):
    task_id = enqueue()
    explode_on_claim(mysql_worker_conn, 0)
    with pytest.raises(DatabaseError, match="exploded"):
        store.claim(mysql_worker_conn, 1)
    assert not in_transaction(mysql_worker_conn)
    assert row_of(mysql_admin, mysql_queue.table, task_id)["status"] == "pendente"
    assert lock_holder(mysql_admin, store, mysql_worker_conn, task_id) is None
    explode_on_claim(mysql_worker_conn, 1213)  # retried like a real deadlock
    assert [t["id"] for t in store.claim(mysql_worker_conn, 1)] == [task_id]


def replace_claim_procedure(admin, queue, comment: str) -> None:
    """The queue's claim procedure, replaced by one that fails loudly, under ``comment``."""
    name = claim_routine_name(queue.table)
    admin_exec(admin, f"DROP PROCEDURE {name}")
    admin_exec(
        admin,
        f"""
        CREATE PROCEDURE {name}(IN p_task_id BIGINT, IN p_mensagem VARCHAR(500), IN p_lock_prefix VARCHAR(64))
        COMMENT '{comment}'
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the stand-in procedure ran (test)'""",
    )


def test_the_claim_procedure_of_this_version_is_what_claims(
    mysql_queue, enqueue, mysql_worker_conn, mysql_admin
):
    enqueue()
    replace_claim_procedure(mysql_admin, mysql_queue, claim_procedure_version())
    store = get_dialect("mysql").store(mysql_queue.table)
    with pytest.raises(DatabaseError, match="stand-in procedure ran"):
        store.claim(mysql_worker_conn, 1)
    assert not in_transaction(mysql_worker_conn)


def test_a_claim_procedure_of_another_version_is_not_called(
    mysql_queue, enqueue, mysql_worker_conn, mysql_admin, caplog
):
    """A procedure db_gen made for another release may return another row: plain SQL until --upgrade."""
    first, second = enqueue(dict(prioridade=90), dict(prioridade=10))
    replace_claim_procedure(mysql_admin, mysql_queue, "nsj_queue_lib claim 0000000000000000")
    store = get_dialect("mysql").store(mysql_queue.table)
    [task] = store.claim(mysql_worker_conn, 1)
    assert "db_gen --upgrade" in caplog.text
    nxt = store.complete_and_claim(
        mysql_worker_conn, first, "ok", store.task_lock_keys(0, first), 1
    )
    assert (task["id"], [t["id"] for t in nxt]) == (first, [second])


def test_a_claim_procedure_dropped_under_a_running_worker_costs_nothing(
    mysql_queue, enqueue, mysql_worker_conn, mysql_admin, caplog
):
    """The CALL fails before doing anything: the same batch goes again in plain SQL, in the same transaction."""
    first, second, third = enqueue(dict(prioridade=90), dict(prioridade=50), dict(prioridade=10))
    store = get_dialect("mysql").store(mysql_queue.table)
    [task] = store.claim(mysql_worker_conn, 1)
    admin_exec(
        mysql_worker_conn, f"UPDATE {mysql_queue.table} SET tenant = 99 WHERE id = %s", (first,)
    )
    admin_exec(mysql_admin, f"DROP PROCEDURE {claim_routine_name(mysql_queue.table)}")
    nxt = store.complete_and_claim(
        mysql_worker_conn, first, "ok", store.task_lock_keys(0, first), 1
    )
    assert "cannot be called" in caplog.text
    assert [t["id"] for t in nxt] == [second]
    row = row_of(mysql_admin, mysql_queue.table, first)
    assert (row["status"], row["mensagem"], row["tenant"]) == (
        "sucesso",
        "ok",
        99,
    )  # the handler's work kept
    assert lock_holder(mysql_admin, store, mysql_worker_conn, first) is None
    assert (
        lock_holder(mysql_admin, store, mysql_worker_conn, second) == mysql_worker_conn.thread_id()
    )
    nxt = store.complete_and_claim(
        mysql_worker_conn, second, "ok", store.task_lock_keys(0, second), 1
    )
    assert [t["id"] for t in nxt] == [third]
    assert (
        fetch_value(
            mysql_admin, f"SELECT count(*) FROM {mysql_queue.table} WHERE status LIKE 'falha%%'"
        )
        == 0
    )


def test_a_claim_procedure_dropped_before_an_idle_claim_falls_back_at_once(
    mysql_queue, enqueue, mysql_worker_conn, mysql_admin
):
    first, second = enqueue(dict(prioridade=90), dict(prioridade=10))
    store = get_dialect("mysql").store(mysql_queue.table)
    [task] = store.claim(mysql_worker_conn, 1)
    store.complete_and_claim(mysql_worker_conn, first, "ok", store.task_lock_keys(0, first), 0)
    admin_exec(mysql_admin, f"DROP PROCEDURE {claim_routine_name(mysql_queue.table)}")
    assert [t["id"] for t in store.claim(mysql_worker_conn, 1)] == [second]
    assert (
        lock_holder(mysql_admin, store, mysql_worker_conn, second) == mysql_worker_conn.thread_id()
    )


def drain_order(store, conn) -> list[int]:
    """Ids in the order one executor claims them, each claim following the completion of the last."""
    order = []
    tasks = store.claim(conn, 1)
    while tasks:
        order.append(tasks[0]["id"])
        tasks = store.complete_and_claim(
            conn, order[-1], "ok", store.task_lock_keys(0, order[-1]), 1
        )
    return order


def test_claims_after_completions_follow_priority_then_age_null_priority_last(
    mysql_queue, enqueue, mysql_worker_conn, mysql_admin
):
    """The procedure claims from the first ready task it finds without locks, across priority bands."""
    low, high, older, newer = enqueue(
        dict(prioridade=10, data_hora=ago(9)),
        dict(prioridade=90, data_hora=ago(1)),
        dict(prioridade=50, data_hora=ago(8)),
        dict(prioridade=50, data_hora=ago(7)),
    )
    no_priority = enqueue(data_hora=ago(20))
    admin_exec(
        mysql_admin,
        f"UPDATE {mysql_queue.table} SET prioridade = NULL WHERE id = %s",
        (no_priority,),
    )
    store = get_dialect("mysql").store(mysql_queue.table)
    assert drain_order(store, mysql_worker_conn) == [high, older, newer, low, no_priority]


POSITION_SECONDS = 0.02  # how long a claim procedure's look-up is reused (claim_procedure.sql)


def test_a_task_that_becomes_ready_ahead_is_claimed_once_the_look_up_is_older_than_20_ms(
    mysql_queue, enqueue, mysql_worker_conn
):
    """Claims start at the session's last claim for 20 ms after a look-up, then look for the first ready task anew."""
    first, second = enqueue(dict(prioridade=50), dict(prioridade=50))
    store = get_dialect("mysql").store(mysql_queue.table)
    assert [t["id"] for t in store.claim(mysql_worker_conn, 1)] == [first]
    urgent = enqueue(prioridade=90)
    time.sleep(POSITION_SECONDS * 1.5)
    nxt = store.complete_and_claim(
        mysql_worker_conn, first, "ok", store.task_lock_keys(0, first), 1
    )
    assert [t["id"] for t in nxt] == [urgent]
    nxt = store.complete_and_claim(
        mysql_worker_conn, urgent, "ok", store.task_lock_keys(0, urgent), 1
    )
    assert [t["id"] for t in nxt] == [second]


def test_a_claim_finding_nothing_after_its_position_looks_up_at_once(
    mysql_queue, enqueue, mysql_worker_conn
):
    """Nothing is ready after the last claim, but a task became ready ahead of it: the same call claims it."""
    first = enqueue(prioridade=50)
    store = get_dialect("mysql").store(mysql_queue.table)
    assert [t["id"] for t in store.claim(mysql_worker_conn, 1)] == [first]
    urgent = enqueue(prioridade=90)
    nxt = store.complete_and_claim(
        mysql_worker_conn, first, "ok", store.task_lock_keys(0, first), 1
    )
    assert [t["id"] for t in nxt] == [urgent]
    assert (
        store.complete_and_claim(
            mysql_worker_conn, urgent, "ok", store.task_lock_keys(0, urgent), 1
        )
        == []
    )


def test_a_position_is_used_only_by_claims_of_its_own_queue(
    mysql_queue, enqueue, mysql_worker_conn, mysql_admin, mysql_kwargs
):
    """One session claiming from two queues: the position of one never steers the claim of the other."""
    other = create_queue(mysql_admin, mysql_queue.database)
    try:
        other_store = get_dialect("mysql").store(other.table)
        client = connect(mysql_kwargs)
        try:
            queue = QueueClient(client, other.table)
            high, low = (queue.insert_task(**dict(TASK, prioridade=p)) for p in (90, 10))
            client.commit()
        finally:
            client.close()
        first = enqueue(prioridade=50)
        store = get_dialect("mysql").store(mysql_queue.table)
        # This queue's claim leaves the position (50, ...); in the other queue it lies between low and high.
        assert [t["id"] for t in store.claim(mysql_worker_conn, 1)] == [first]
        mysql_worker_conn.rollback()
        store.unlock_task(mysql_worker_conn, store.task_lock_keys(0, first))
        assert [t["id"] for t in other_store.claim(mysql_worker_conn, 1)] == [high]
        mysql_worker_conn.rollback()
        other_store.unlock_task(mysql_worker_conn, other_store.task_lock_keys(0, high))
    finally:
        drop_queue_tables(mysql_admin, mysql_queue.database, other.name)


def innodb_lock_requests(admin) -> int:
    admin_exec(admin, "SET GLOBAL innodb_monitor_enable = 'lock_rec_lock_requests'")
    return fetch_value(
        admin,
        "SELECT `count` FROM information_schema.innodb_metrics "
        "WHERE name = 'lock_rec_lock_requests'",
    )


def test_the_claim_passes_entries_of_claimed_tasks_without_locking_them(
    mysql_queue, enqueue, mysql_worker_conn, mysql_admin, mysql_kwargs
):
    """Claimed tasks leave delete-marked claim index entries until purge: the claim must not lock each one."""
    claimed = 250
    enqueue(*[dict(chave_externa=str(n)) for n in range(claimed + 10)])
    snapshot = connect(mysql_kwargs, autocommit=True)  # an open snapshot holds purge back
    try:
        admin_exec(snapshot, "START TRANSACTION WITH CONSISTENT SNAPSHOT")
        fetch_value(snapshot, f"SELECT count(*) FROM {mysql_queue.table}")
        store = get_dialect("mysql").store(mysql_queue.table)
        order = [store.claim(mysql_worker_conn, 1)[0]["id"]]
        while len(order) < claimed:
            nxt = store.complete_and_claim(
                mysql_worker_conn, order[-1], "ok", store.task_lock_keys(0, order[-1]), 1
            )
            order.append(nxt[0]["id"])
        # A locking read from the start of the 'pendente' range still meets every one of those entries.
        admin_exec(mysql_admin, "BEGIN")
        before = innodb_lock_requests(mysql_admin)
        fetch_value(
            mysql_admin,
            f"SELECT id FROM {mysql_queue.table} WHERE status = 'pendente' "
            "ORDER BY prioridade DESC, data_hora, id LIMIT 1 FOR UPDATE SKIP LOCKED",
        )
        head_scan = innodb_lock_requests(mysql_admin) - before
        admin_exec(mysql_admin, "ROLLBACK")
        assert head_scan >= claimed
        before = innodb_lock_requests(mysql_admin)
        nxt = store.complete_and_claim(
            mysql_worker_conn, order[-1], "ok", store.task_lock_keys(0, order[-1]), 1
        )
        procedure = innodb_lock_requests(mysql_admin) - before
        assert [t["id"] for t in nxt] == [order[-1] + 1]
        assert procedure < 30, (procedure, head_scan)
    finally:
        snapshot.close()


def test_without_the_claim_index_the_claim_reads_from_the_start_in_repeatable_read(
    mysql_queue, enqueue, mysql_worker_conn, mysql_admin, mysql_kwargs
):
    """The look-up names the claim index: without it, it fails, and the claim still works;
    READ UNCOMMITTED stays with the look-up."""
    first, second = enqueue(dict(prioridade=90), dict(prioridade=10))
    store = get_dialect("mysql").store(mysql_queue.table)
    store.claim(mysql_worker_conn, 1)
    store.commit(mysql_worker_conn)  # the handler's transaction ends: nothing holds the table
    admin_exec(mysql_admin, f"DROP INDEX {mysql_queue.claim_index} ON {mysql_queue.table}")
    store.begin(mysql_worker_conn)
    nxt = store.complete_and_claim(
        mysql_worker_conn, first, "ok", store.task_lock_keys(0, first), 1
    )
    assert [t["id"] for t in nxt] == [second]
    other = connect(mysql_kwargs)  # an uncommitted insert READ UNCOMMITTED would see
    try:
        QueueClient(other, mysql_queue.table).insert_task(**TASK)
        assert fetch_value(mysql_worker_conn, f"SELECT count(*) FROM {mysql_queue.table}") == 2
    finally:
        other.rollback()
        other.close()


def test_a_queue_in_a_latin1_database_keeps_every_character(mysql_admin, mysql_kwargs):
    """The claim procedure's parameters and variables take the database's character set unless told otherwise."""
    database = unique_queue_name("nsjq_l1_")
    admin_exec(mysql_admin, f"CREATE DATABASE {database} CHARACTER SET latin1")
    try:
        queue = create_queue(mysql_admin, database)
        payload, mensagem = "payload: ação 日本 😀", "mensagem: ação 日本 😀"
        client_conn = connect(mysql_kwargs)
        try:
            QueueClient(client_conn, queue.table).insert_task("erp", "fiscal", "p", "k", payload)
            client_conn.commit()
        finally:
            client_conn.close()
        store = get_dialect("mysql").store(queue.table)
        worker = connect(mysql_kwargs, autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS)
        try:
            store.configure_executor_connection(worker)
            [task] = store.claim(worker, 1)
            assert store._has_claim_procedure(worker) and task["payload"] == payload
            assert (
                store.complete_and_claim(
                    worker, task["id"], mensagem, store.task_lock_keys(0, task["id"]), 1
                )
                == []
            )
        finally:
            worker.close()
        assert row_of(mysql_admin, queue.table, task["id"])["mensagem"] == mensagem
    finally:
        admin_exec(mysql_admin, f"DROP DATABASE {database}")


def test_complete_of_a_task_no_longer_running_writes_nothing(
    store, enqueue, mysql_worker_conn, mysql_admin
):
    task_id = enqueue()
    store.claim(mysql_worker_conn, 1)
    admin_exec(
        mysql_admin,
        f"UPDATE {store.queue_table} SET status = 'falha_processando' WHERE id = %s",
        (task_id,),
    )
    store.complete_and_claim(mysql_worker_conn, task_id, "ok", store.task_lock_keys(0, task_id), 0)
    assert row_of(mysql_admin, store.queue_table, task_id)["status"] == "falha_processando"


def test_concurrent_claims_never_share_a_task(store, enqueue, new_worker_conn, mysql_admin):
    total = 400
    for start in range(0, total, 100):
        enqueue(*[dict(chave_externa=str(n), prioridade=n % 5) for n in range(start, start + 100)])
    conns = [new_worker_conn() for _ in range(8)]
    claimed: list[list[int]] = [[] for _ in conns]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(conns))

    def work(index: int) -> None:
        conn = conns[index]
        try:
            barrier.wait()
            tasks = store.claim(conn, 1 + index % 3)
            while tasks:
                task, rest = tasks[0], tasks[1:]
                claimed[index].append(task["id"])
                limit = 0 if rest else 1 + index % 3
                nxt = store.complete_and_claim(
                    conn, task["id"], "ok", store.task_lock_keys(0, task["id"]), limit
                )
                for extra in rest:  # claimed together: complete them one by one
                    store.begin(conn)
                    claimed[index].append(extra["id"])
                    store.complete_and_claim(
                        conn, extra["id"], "ok", store.task_lock_keys(0, extra["id"]), 0
                    )
                tasks = nxt if not rest else store.claim(conn, 1 + index % 3)
        except BaseException as exc:  # the test asserts none were collected
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(conns))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    everything = [task_id for ids in claimed for task_id in ids]
    assert len(everything) == total and len(set(everything)) == total
    assert sum(1 for ids in claimed if ids) > 1  # several workers really took part
    statuses = fetch_dicts(
        mysql_admin, f"SELECT status, count(*) AS n FROM {store.queue_table} GROUP BY status"
    )
    assert statuses == [{"status": "sucesso", "n": total}]


# -- failures: the same rows as on PostgreSQL --------------------------------------

ID_COLUMNS = ("id", "id_inicial", "id_anterior", "live_id", "publication_id")
TIME_COLUMNS = ("data_hora_inicial", "data_hora", "proxima_tentativa", "data_hora_anterior")
BOOLEAN_COLUMNS = ("reenfileirado", "estouro_tentativas", "pub_sub", "dead")


def comparable(rows: list[dict], labels: dict[int, str]) -> list[dict]:
    """Rows without their database's ids and times: ids become labels, times are compared apart."""
    out = []
    for row in rows:
        item = {}
        for column in model.QUEUE_COLUMNS:
            value = row[column]
            if column in ID_COLUMNS:
                value = labels.get(value, value)
            elif column in TIME_COLUMNS:
                value = value is not None
            elif column in BOOLEAN_COLUMNS:
                value = bool(value)
            elif column == "payload_hash" and value is not None:
                value = bytes(value)
            item[column] = value
        out.append(item)
    return out


class PgSide:
    def __init__(self, dsn, queue):
        import psycopg

        from nsj_queue_lib.db.postgres.store import queue_lock_key, task_lock_keys

        self.store = get_dialect("postgres").store(queue.table, queue.subscriber_table)
        self.table = queue.table
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.reader = psycopg.connect(dsn, autocommit=True)
        self.client_conn = psycopg.connect(dsn)
        self.oid = self.store.queue_oid(self.conn)
        self._queue_key = queue_lock_key(self.oid)
        self._keys = lambda task_id: task_lock_keys(self.oid, task_id)

    def claim(self, limit=1):
        return self.store.claim(self.conn, limit, self._queue_key)

    def keys(self, task_id):
        return self._keys(task_id)

    def rows(self):
        cur = self.reader.execute(f"SELECT * FROM {self.table} ORDER BY id")
        return [
            dict(zip([c.name for c in cur.description], r, strict=True)) for r in cur.fetchall()
        ]

    def now(self):
        return self.reader.execute("SELECT clock_timestamp()").fetchone()[0]

    def close(self):
        for conn in (self.conn, self.reader, self.client_conn):
            conn.close()


class MysqlSide:
    def __init__(self, kwargs, queue, store):
        self.store = store
        self.table = queue.table
        self.conn = connect(kwargs, autocommit=True)
        store.configure_executor_connection(self.conn)
        self.reader = connect(kwargs, autocommit=True)
        with self.reader.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        self.client_conn = connect(kwargs)

    def claim(self, limit=1):
        return self.store.claim(self.conn, limit)

    def keys(self, task_id):
        return self.store.task_lock_keys(0, task_id)

    def rows(self):
        return fetch_dicts(self.reader, f"SELECT * FROM {self.table} ORDER BY id")

    def now(self):
        return fetch_value(self.reader, "SELECT NOW(6)")

    def close(self):
        for conn in (self.conn, self.reader, self.client_conn):
            conn.close()


@pytest.fixture
def sides(pg_dsn, pg_queue, mysql_kwargs, mysql_queue, store):
    pg = PgSide(pg_dsn, pg_queue)
    my = MysqlSide(mysql_kwargs, mysql_queue, store)
    try:
        yield pg, my
    finally:
        pg.close()
        my.close()


def run_scenario(side, scenario: str):
    """Enqueue a task, claim it and fail it as the executor does; the table's rows and timings."""
    client = QueueClient(side.client_conn, side.table)
    first = client.insert_task(
        **dict(TASK, payload={"pedido": 7}, tenant=5, grupo_empresarial="g"), prioridade=60
    )
    side.client_conn.commit()
    (task,) = side.claim()
    started = side.now()
    s = side.store
    s.rollback(side.conn)  # the handler failed: its work is rolled back
    s.begin(side.conn)
    if scenario == "retry":
        result = s.fail_and_retry(side.conn, task["id"], "falha", "boom", 90.0)
    elif scenario == "bury":
        result = s.fail_and_bury(side.conn, task["id"], "falha", "boom", task["payload"])
    elif scenario == "final":
        result = s.fail_final(side.conn, task["id"], "falha", "boom")
    elif scenario == "retry-twice":
        second = s.fail_and_retry(side.conn, task["id"], "falha", "boom", 0.0)
        s.unlock_task(side.conn, side.keys(task["id"]))
        s.commit(side.conn)
        assert s.promote_due(side.conn, 10) == 1
        (task2,) = side.claim()
        assert task2["id"] == second
        assert task2["payload"] == '{"pedido":7}'  # from the first attempt
        s.rollback(side.conn)
        s.begin(side.conn)
        task = task2
        result = s.fail_and_retry(side.conn, task2["id"], "falha_processando", "lost", 30.0)
    s.unlock_task(side.conn, side.keys(task["id"]))
    s.commit(side.conn)
    # A second settle of the same attempt changes nothing.
    s.begin(side.conn)
    assert s.fail_and_retry(side.conn, task["id"], "falha", "again", 1.0) is None
    assert s.fail_and_bury(side.conn, task["id"], "falha", "again", None) is None
    assert s.fail_final(side.conn, task["id"], "falha", "again") is False
    s.commit(side.conn)
    return first, result, side.rows(), started


@pytest.mark.parametrize("scenario", ["retry", "bury", "final", "retry-twice"])
def test_failures_write_the_same_rows_as_postgresql(sides, scenario):
    results = []
    for side in sides:
        first, result, rows, started = run_scenario(side, scenario)
        labels = {row["id"]: f"row{n}" for n, row in enumerate(rows)}
        results.append((comparable(rows, labels), rows, started, result, labels))
    (
        (pg_rows, pg_raw, _, pg_result, pg_labels),
        (my_rows, my_raw, my_started, my_result, my_labels),
    ) = results
    assert my_rows == pg_rows
    if scenario == "final":
        assert pg_result is True and my_result is True
    else:
        assert my_labels[my_result] == pg_labels[pg_result]
    # The times relate to each other the same way on both databases.
    for raw in (pg_raw, my_raw):
        if scenario in ("retry", "retry-twice"):
            failed, nxt = raw[-2], raw[-1]
            assert nxt["data_hora"] == failed["proxima_tentativa"]
            assert nxt["data_hora_anterior"] == failed["data_hora"]
            assert nxt["data_hora_inicial"] == raw[0]["data_hora_inicial"]
        if scenario == "bury":
            assert raw[1]["data_hora"] == raw[1]["data_hora_inicial"]
    if scenario == "retry":
        delay = my_raw[1]["data_hora"] - my_started
        assert datetime.timedelta(seconds=89) < delay < datetime.timedelta(seconds=91)


def test_release_gives_a_claimed_task_back(store, enqueue, mysql_worker_conn, mysql_admin):
    task_id = enqueue()
    store.claim(mysql_worker_conn, 1)
    assert store.release(mysql_worker_conn, task_id) is True
    store.unlock_task(mysql_worker_conn, store.task_lock_keys(0, task_id))
    store.commit(mysql_worker_conn)
    assert row_of(mysql_admin, store.queue_table, task_id)["status"] == "pendente"
    assert store.release(mysql_worker_conn, task_id) is False


# -- retry service: orphans ----------------------------------------------------------


def test_find_orphans_sees_a_running_row_without_lock_only(
    store, enqueue, mysql_worker_conn, mysql_worker_conn_2, mysql_admin, new_worker_conn
):
    live, orphan = enqueue(dict(prioridade=90), dict(chave_externa="orphan", prioridade=10))
    store.claim(mysql_worker_conn, 1)  # 'live' is running, its lock held
    admin_exec(
        mysql_admin,
        f"UPDATE {store.queue_table} SET status = 'processando' WHERE id = %s",
        (orphan,),
    )

    store.begin(mysql_worker_conn_2)
    found = store.find_orphans(mysql_worker_conn_2, None, 10)
    assert [t["id"] for t in found] == [orphan]
    assert found[0]["payload"] == "texto" and found[0]["chave_externa"] == "orphan"
    # The rescuer holds the row: another rescuer skips it instead of waiting.
    third = new_worker_conn()
    store.begin(third)
    assert store.find_orphans(third, None, 10) == []
    # Without the database locks (client/server mode) the live row is a candidate too;
    # the row being rescued is still skipped.
    assert [t["id"] for t in store.find_orphans(third, None, 10, check_db_locks=False)] == [live]
    store.rollback(third)
    assert (
        store.fail_and_retry(mysql_worker_conn_2, orphan, model.FALHA_PROCESSANDO, "lost", 60)
        is not None
    )
    store.commit(mysql_worker_conn_2)
    assert row_of(mysql_admin, store.queue_table, orphan)["status"] == "falha_processando"


def test_a_killed_worker_leaves_an_orphan(
    store, enqueue, new_worker_conn, mysql_admin, mysql_worker_conn
):
    task_id = enqueue()
    victim = new_worker_conn()
    store.claim(victim, 1)
    store.begin(mysql_worker_conn)
    assert store.find_orphans(mysql_worker_conn, None, 10) == []
    store.rollback(mysql_worker_conn)
    store.terminate_session(mysql_admin, victim)
    deadline = time.monotonic() + 10
    while (
        lock_holder(mysql_admin, store, mysql_admin, task_id) is not None
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    store.begin(mysql_worker_conn)
    assert [t["id"] for t in store.find_orphans(mysql_worker_conn, None, 10)] == [task_id]
    store.rollback(mysql_worker_conn)


# -- renotify and purge ------------------------------------------------------------


def test_promote_due_is_bounded_and_leaves_future_rows(
    store, enqueue, mysql_worker_conn, mysql_admin
):
    due = enqueue(*[dict(chave_externa=str(n), data_hora=ago(10 + n)) for n in range(5)])
    future = enqueue(data_hora=ago(-3600))
    admin_exec(mysql_admin, f"UPDATE {store.queue_table} SET status = 'agendada'")
    assert store.promote_due(mysql_worker_conn, 3) == 3
    assert store.promote_due(mysql_worker_conn, 3) == 2
    assert store.promote_due(mysql_worker_conn, 3) == 0
    statuses = {
        r["id"]: r["status"]
        for r in fetch_dicts(mysql_admin, f"SELECT id, status FROM {store.queue_table}")
    }
    assert all(statuses[i] == "pendente" for i in due) and statuses[future] == "agendada"


def test_waiting_rows_and_next_due(store, enqueue, mysql_worker_conn):
    assert store.seconds_until_next_due(mysql_worker_conn) is None
    assert store.has_stale_pending(mysql_worker_conn, 1) is False
    enqueue(data_hora=ago(10))
    assert store.has_stale_pending(mysql_worker_conn, 5) is True
    assert store.has_stale_pending(mysql_worker_conn, 60) is False
    enqueue(data_hora=ago(-120))
    assert 110 < store.seconds_until_next_due(mysql_worker_conn) <= 120


def test_purge_is_bounded_and_never_touches_active_rows(
    store, enqueue, mysql_worker_conn, mysql_admin
):
    table = store.queue_table
    old = ago(40 * 86400)
    settled = enqueue(*[dict(chave_externa=f"old{n}", data_hora=old) for n in range(5)])
    admin_exec(mysql_admin, f"UPDATE {table} SET status = 'sucesso' WHERE id IN %s", (settled,))
    active = enqueue(*[dict(chave_externa=f"active{n}", data_hora=old) for n in range(3)])
    for task_id, status in zip(active, ("pendente", "agendada", "processando"), strict=True):
        admin_exec(mysql_admin, f"UPDATE {table} SET status = %s WHERE id = %s", (status, task_id))
    young = enqueue(chave_externa="young")
    admin_exec(mysql_admin, f"UPDATE {table} SET status = 'sucesso' WHERE id = %s", (young,))
    # A failed first attempt whose retry is still waiting keeps its payload.
    chain_first = enqueue(chave_externa="chain", data_hora=old)
    chain_next = enqueue(chave_externa="chain-next", data_hora=old)
    admin_exec(mysql_admin, f"UPDATE {table} SET status = 'falha' WHERE id = %s", (chain_first,))
    admin_exec(
        mysql_admin,
        f"UPDATE {table} SET status = 'agendada', id_inicial = %s, payload = NULL WHERE id = %s",
        (chain_first, chain_next),
    )

    assert store.purge_round(mysql_worker_conn, 30, 2) == 2
    assert store.purge_round(mysql_worker_conn, 30, 2) == 2
    assert store.purge_round(mysql_worker_conn, 30, 2) == 1
    assert store.purge_round(mysql_worker_conn, 30, 2) == 0
    left = {r["id"] for r in fetch_dicts(mysql_admin, f"SELECT id FROM {table}")}
    assert left == set(active) | {young, chain_first, chain_next}
    # Once the chain is settled, its rows go too.
    admin_exec(mysql_admin, f"UPDATE {table} SET status = 'sucesso' WHERE id = %s", (chain_next,))
    assert store.purge_round(mysql_worker_conn, 30, 10) == 2


# -- services' locks, notify ---------------------------------------------------------


def test_service_lock_is_held_by_one_connection(
    store, mysql_worker_conn, mysql_worker_conn_2, mysql_admin
):
    key = -1234567890123
    assert store.try_service_lock(mysql_worker_conn, key) is True
    assert store.try_service_lock(mysql_worker_conn_2, key) is False
    assert (
        fetch_value(
            mysql_admin, "SELECT IS_USED_LOCK(%s)", (store.service_lock_name(mysql_admin, key),)
        )
        == mysql_worker_conn.thread_id()
    )
    store.service_unlock(mysql_worker_conn, key)
    assert store.try_service_lock(mysql_worker_conn_2, key) is True
    # Another queue's service lock with the same key is another lock.
    other = get_dialect("mysql").store(f"{store.queue_table}_other")
    assert other.try_service_lock(mysql_worker_conn, key) is True


def test_notify_sends_nothing(store, mysql_worker_conn):
    before = questions(mysql_worker_conn)
    store.notify(mysql_worker_conn, "fila", "HALT")
    assert questions(mysql_worker_conn) - before == 1


# -- lock errors: retried, never a task failure ----------------------------------------


@pytest.mark.parametrize("limit", [0, 1])
def test_a_lock_wait_timeout_while_completing_is_retried(
    limit, store, enqueue, mysql_worker_conn, mysql_kwargs, mysql_admin
):
    task_id = enqueue()
    store.claim(mysql_worker_conn, 1)
    with mysql_worker_conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
    blocker = connect(mysql_kwargs)
    try:
        with blocker.cursor() as cur:
            cur.execute(f"SELECT id FROM {store.queue_table} WHERE id = %s FOR UPDATE", (task_id,))
        releaser = threading.Timer(1.5, blocker.commit)
        releaser.start()
        started = time.monotonic()
        assert (
            store.complete_and_claim(
                mysql_worker_conn, task_id, "ok", store.task_lock_keys(0, task_id), limit
            )
            == []
        )
        assert time.monotonic() - started >= 1  # it did wait and time out at least once
        releaser.join()
    finally:
        blocker.close()
    assert row_of(mysql_admin, store.queue_table, task_id)["status"] == "sucesso"
    assert lock_holder(mysql_admin, store, mysql_admin, task_id) is None


@pytest.mark.parametrize("limit", [0, 1])
def test_a_deadlock_while_completing_puts_the_task_back(
    limit, store, enqueue, mysql_worker_conn, mysql_kwargs, mysql_admin, mysql_queue, caplog
):
    """The handler's transaction is chosen as the deadlock victim when it completes:
    its work is gone, so the task goes back to 'pendente' to run again; no failure is recorded."""
    task_id, other_id = enqueue(dict(prioridade=90), dict(prioridade=1))
    # Keep the second row out of the claim.
    admin_exec(
        mysql_admin, f"UPDATE {mysql_queue.table} SET status = 'sucesso' WHERE id = %s", (other_id,)
    )
    store.claim(mysql_worker_conn, 1)
    # The handler's work: it locks the other row.
    admin_exec(
        mysql_worker_conn,
        f"UPDATE {mysql_queue.table} SET mensagem = 'handler' WHERE id = %s",
        (other_id,),
    )
    rival = connect(mysql_kwargs)
    errors: list[BaseException] = []
    try:
        with rival.cursor() as cur:
            # A heavier transaction (more rows changed), so InnoDB picks the handler as the victim.
            cur.execute(
                f"UPDATE {mysql_queue.table} SET mensagem = 'rival' WHERE id = %s", (task_id,)
            )
            cur.execute(
                f"INSERT INTO {mysql_queue.table} (processo, status) VALUES "
                + ", ".join(["('filler', 'sucesso')"] * 50)
            )

        def rival_waits() -> None:
            try:
                with rival.cursor() as cur:
                    cur.execute(
                        f"UPDATE {mysql_queue.table} SET mensagem = 'rival' WHERE id = %s",
                        (other_id,),
                    )
                rival.commit()
            except BaseException as exc:  # the test asserts none were collected
                errors.append(exc)

        thread = threading.Thread(target=rival_waits)
        thread.start()
        time.sleep(0.5)  # the rival now waits for the handler's row lock
        nxt = store.complete_and_claim(
            mysql_worker_conn, task_id, "ok", store.task_lock_keys(0, task_id), limit
        )
        thread.join(30)
    finally:
        rival.close()
    assert not errors, errors
    assert "Deadlock" in caplog.text  # the 1213 path was taken
    row = row_of(mysql_admin, mysql_queue.table, task_id)
    if limit:  # claimed again at once, by the same worker
        assert [t["id"] for t in nxt] == [task_id] and row["status"] == "processando"
        mysql_worker_conn.rollback()
        store.unlock_task(mysql_worker_conn, store.task_lock_keys(0, task_id))
    else:
        assert nxt == [] and row["status"] == "pendente"  # back in the queue, not 'falha'
    assert (
        row_of(mysql_admin, mysql_queue.table, other_id)["mensagem"] == "rival"
    )  # the handler's work is gone
    assert lock_holder(mysql_admin, store, mysql_admin, task_id) is None
    assert (
        fetch_value(
            mysql_admin, f"SELECT count(*) FROM {mysql_queue.table} WHERE status LIKE 'falha%%'"
        )
        == 0
    )


# -- client/server mode ---------------------------------------------------------------


@pytest.mark.parametrize("dialect", ["mysql", "singlestore"])
def test_claim_uncommitted_then_commit(
    dialect, enqueue, mysql_queue, mysql_worker_conn, mysql_admin
):
    chosen = get_dialect(dialect).store(mysql_queue.table, mysql_queue.subscriber_table)
    first, second = enqueue(dict(prioridade=90), dict(prioridade=10))
    tasks = chosen.claim_uncommitted(mysql_worker_conn, 1)
    assert [t["id"] for t in tasks] == [first] and tasks[0]["status"] == "processando"
    assert "liveness_locked" not in tasks[0]
    assert (
        row_of(mysql_admin, mysql_queue.table, first)["status"] == "pendente"
    )  # not committed yet
    chosen.commit_and_begin(mysql_worker_conn)
    assert row_of(mysql_admin, mysql_queue.table, first)["status"] == "processando"
    assert in_transaction(mysql_worker_conn)
    assert lock_holder(mysql_admin, chosen, mysql_worker_conn, first) is None  # no database lock
    assert chosen.complete_if_running(mysql_worker_conn, first, "ok") is True
    chosen.commit(mysql_worker_conn)
    assert chosen.complete_if_running(mysql_worker_conn, first, "again") is False
    chosen.rollback(mysql_worker_conn)
    # Rolled back: the task is 'pendente' again for everyone.
    assert [t["id"] for t in chosen.claim_uncommitted(mysql_worker_conn, 5)] == [second]
    chosen.rollback(mysql_worker_conn)
    assert row_of(mysql_admin, mysql_queue.table, second)["status"] == "pendente"


def test_singlestore_claims_by_conditional_update_exactly_once(
    enqueue, mysql_queue, new_worker_conn, mysql_admin
):
    chosen = get_dialect("singlestore").store(mysql_queue.table)
    assert isinstance(chosen, SingleStoreQueueStore)
    total = 200
    for start in range(0, total, 100):
        enqueue(*[dict(chave_externa=str(n)) for n in range(start, start + 100)])
    conns = [new_worker_conn() for _ in range(6)]
    claimed: list[list[int]] = [[] for _ in conns]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(conns))

    def work(index: int) -> None:
        conn = conns[index]
        try:
            barrier.wait()
            while True:
                tasks = chosen.claim_uncommitted(conn, 2)
                if not tasks:
                    return
                chosen.commit_and_begin(conn)
                for task in tasks:
                    claimed[index].append(task["id"])
                    assert chosen.complete_if_running(conn, task["id"], "ok")
                chosen.commit(conn)
        except BaseException as exc:  # the test asserts none were collected
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(conns))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    everything = [task_id for ids in claimed for task_id in ids]
    assert len(everything) == total and len(set(everything)) == total
    assert (
        fetch_value(
            mysql_admin, f"SELECT count(*) FROM {mysql_queue.table} WHERE status = 'sucesso'"
        )
        == total
    )


def test_singlestore_store_without_the_socket_server_refuses_clearly(
    mysql_queue, mysql_worker_conn
):
    chosen = get_dialect("SINGLE_STORE").store(mysql_queue.table)
    for call in (
        lambda: chosen.claim(mysql_worker_conn, 1, 0),
        lambda: chosen.complete_and_claim(mysql_worker_conn, 1, "ok", (0, 1), 1, 0),
        lambda: chosen.unlock_task(mysql_worker_conn, (0, 1)),
        lambda: chosen.try_service_lock(mysql_worker_conn, 1),
        lambda: chosen.service_unlock(mysql_worker_conn, 1),
        lambda: chosen.find_orphans(mysql_worker_conn, 0, 10),
    ):
        with pytest.raises(ConfigError, match="CLIENT_SERVER_MODE"):
            call()


def test_singlestore_find_orphans_lists_running_rows(
    enqueue, mysql_queue, mysql_worker_conn, mysql_admin
):
    chosen = get_dialect("singlestore").store(mysql_queue.table)
    running, waiting = enqueue(dict(chave_externa="a"), dict(chave_externa="b"))
    admin_exec(
        mysql_admin,
        f"UPDATE {mysql_queue.table} SET status = 'processando' WHERE id = %s",
        (running,),
    )
    found = chosen.find_orphans(mysql_worker_conn, 0, 10, check_db_locks=False)
    assert [t["id"] for t in found] == [running] and found[0]["payload"] == "texto"


def test_singlestore_inserts_one_row_per_statement(mysql_queue, mysql_kwargs, mysql_admin):
    chosen = get_dialect("singlestore").store(mysql_queue.table)
    conn = connect(mysql_kwargs)
    try:
        rows = [
            dict(
                origem="o",
                destino="d",
                processo="p",
                chave_externa=str(n),
                payload="x",
                payload_hash=None,
                tenant=None,
                grupo_empresarial=None,
                pub_sub=False,
                prioridade=n,
                data_hora=None,
            )
            for n in range(5)
        ]
        before = questions(conn)
        ids = chosen.insert_tasks(conn, rows)
        assert questions(conn) - before - 1 == 5
        conn.commit()
    finally:
        conn.close()
    assert [row_of(mysql_admin, mysql_queue.table, i)["prioridade"] for i in ids] == [0, 1, 2, 3, 4]
