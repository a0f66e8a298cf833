"""PostgreSQL's partitioned layout: a task's end moves its row to the day's partition, and a
statement that was waiting for that row fails with SQLSTATE 40001 even under READ
COMMITTED. The calls that meet such a row in the caller's transaction (``insert_task``
with ``after=``, ``cancel_task``) and the retry service's ``find_orphans`` run the
statement again under a savepoint: the caller's transaction goes on
(db/moved_rows.py). MariaDB's partitioned layout, where the same calls wait and
then read the moved row, is held to the same outcome."""

from __future__ import annotations

import threading

import pytest

from tests.helpers.processes import wait_for
from tests.integration.store import backends
from tests.integration.store.backends import execute, value

pytestmark = backends.on(backends.PARTITIONED)


def settling(backend, store, worker):
    """A committed task whose 'sucesso' is written and not committed yet: its id."""
    task_id = backend.enqueue()
    store.bind(worker)
    store.begin(worker)
    assert store.claim_uncommitted(worker).id == task_id
    store.commit_and_begin(worker)
    assert store.complete_if_running(worker, task_id, "ok")
    return task_id


def waiting_for_a_lock(backend, conn):
    if backend.dialect == "postgres":
        sql = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'"
        return backend.value(sql, (conn.info.backend_pid,)) == 1
    # The statement running is a locking read (innodb_trx lags behind a busy server).
    sql = (
        "SELECT count(*) FROM information_schema.processlist WHERE id = %s "
        "AND (info LIKE '%%LOCK IN SHARE MODE' OR info LIKE '%%FOR UPDATE')"
    )
    return backend.value(sql, (conn.thread_id(),)) == 1


def run_while_committed(backend, store, worker, conn, call):
    """``call()`` in a thread until it waits for the settling row; then the settle commits
    (the row moves). What ``call`` returned."""
    result: dict = {}

    def run():
        try:
            result["value"] = call()
        except BaseException as exc:  # asserted below
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_for(lambda: waiting_for_a_lock(backend, conn), timeout=10, what="the call to wait")
    finally:
        store.commit(worker)
        thread.join(30)
    assert "error" not in result, result["error"]
    return result["value"]


@backends.on(backends.PARTITIONED, backends.MYSQL_PARTITIONED)
@pytest.mark.parametrize("call", ["insert_after", "cancel_task"])
def test_a_call_meeting_a_row_just_moved_to_its_day_partition_goes_on(backend, store, worker, call):
    parent = settling(backend, store, worker)
    conn = backend.client_conn()
    client = backend.client(conn)
    # The caller's transaction is open; on MariaDB with a read (an insert would wait for
    # the settle's gap locks on the day partition).
    if backend.dialect == "postgres":
        before = client.insert_task("o", "d", "p", None, "x")
    else:
        before = None
        assert client.get_task(parent)["status"] == "processando"
    if call == "insert_after":
        child = run_while_committed(
            backend,
            store,
            worker,
            conn,
            lambda: client.insert_task("o", "d", "p", None, "x", after=[parent]),
        )
    else:
        status = run_while_committed(
            backend, store, worker, conn, lambda: client.cancel_task(parent)
        )
        assert status == "sucesso"
    conn.commit()
    if before is not None:
        assert backend.row(before)["status"] == "pendente"  # committed with the rest
    if call == "insert_after":
        assert backend.row(child)["status"] == "pendente"


def test_find_orphans_meeting_a_row_just_moved_goes_on(backend, store, worker, monkeypatch):
    """The retry service's look for orphans locks with SKIP LOCKED, which skips a row being
    settled but fails (40001) on one whose settle committed after the statement's snapshot:
    a race no test can time, so the statement here fails so once, as that lock would."""
    orphan = backend.enqueue()
    store.bind(worker)
    assert backend.claim(worker).id == orphan
    worker.close()  # its liveness lock goes with its session: an orphan
    service = backend.worker()
    execute(service, "CREATE SEQUENCE pg_temp.nsjq_moves")
    execute(
        service,
        "CREATE FUNCTION pg_temp.nsjq_moved_once() RETURNS boolean LANGUAGE plpgsql AS $$ "
        "BEGIN IF nextval('pg_temp.nsjq_moves') = 1 THEN "
        "RAISE EXCEPTION 'moved' USING ERRCODE = '40001'; END IF; RETURN true; END $$",
    )
    failing = store.sql["find_orphans"].replace("WHERE ", "WHERE pg_temp.nsjq_moved_once() AND ", 1)
    monkeypatch.setitem(store.sql, "find_orphans", failing)
    store.begin(service)
    before = backend.client(service).insert_task("o", "d", "p", None, "x")
    assert [t.id for t in store.find_orphans(service, 10, True)] == [orphan]
    store.commit(service)
    assert backend.row(before)["status"] == "pendente"  # the transaction went on
    assert value(service, "SELECT currval('pg_temp.nsjq_moves')") >= 2
