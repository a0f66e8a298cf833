"""The executor's libpq-level round trip (db/postgres/wire.py) on real PostgreSQL.

The store's ``complete_and_claim`` sends the claim function's call, prepared
once per connection, and the commit in one pipeline. These tests drive the
store the way an executor thread does (an autocommit connection, transactions
opened by the previous claim's COMMIT AND CHAIN) and check what the session
is left with after every kind of failure.
"""

from __future__ import annotations

import decimal

import psycopg
import pytest

from nsj_queue_lib import model
from nsj_queue_lib.db.postgres.store import PostgresQueueStore
from nsj_queue_lib.db.postgres.wire import PreparedRoundTrip, RoundTripError
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.model import TaskRecord
from tests.helpers.processes import enqueue, fetch_rows
from tests.helpers.worker_harness import wait_until

IDLE = psycopg.pq.TransactionStatus.IDLE
INTRANS = psycopg.pq.TransactionStatus.INTRANS
INERROR = psycopg.pq.TransactionStatus.INERROR


@pytest.fixture
def worker_conn(pg_dsn):
    conn = psycopg.connect(pg_dsn, autocommit=True)
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def store(pg_queue):
    return PostgresQueueStore(pg_queue.table)


def prepared_statements(conn) -> list[str]:
    rows = conn.execute(
        "SELECT name FROM pg_prepared_statements WHERE name LIKE 'nsjq_%' ORDER BY name"
    )
    return [r[0] for r in rows.fetchall()]


def claim_first(store, conn) -> TaskRecord:
    """Bind the store as a worker does at start, then the first claim of an idle executor."""
    store.bind(conn)
    claim = store.claim(conn)
    assert claim is not None and claim.liveness_locked
    return claim.task


def complete(store, conn, task, mensagem="ok", claim_next=True) -> TaskRecord | None:
    """Settle ``task`` as 'sucesso' and (with ``claim_next``) claim the next one, as executors do."""
    claim = store.complete_and_claim(conn, task.id, mensagem, claim_next)
    if claim is None:
        return None
    assert claim.liveness_locked is True
    return claim.task


def test_successive_tasks_come_back_as_the_cursor_path_reads_them(
    store, worker_conn, pg_queue, pg_dsn, pg_autocommit
):
    ids = enqueue(
        pg_dsn, pg_queue.table, [dict(payload=f"p{n}", chave_externa=f"k{n}") for n in range(4)]
    )
    task = claim_first(store, worker_conn)
    seen = [task]
    while True:
        nxt = complete(store, worker_conn, seen[-1], mensagem="Concluído com sucesso")
        if nxt is None:
            break
        assert worker_conn.pgconn.transaction_status == INTRANS  # the next task's transaction
        seen.append(nxt)
    assert [t.id for t in seen] == ids
    assert worker_conn.pgconn.transaction_status == IDLE
    assert worker_conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
    # Same keys, values and Python types as a plain read of the rows (payload resolved).
    for task in seen[1:]:
        [row] = fetch_rows(pg_autocommit, pg_queue.table, "id = %s", (task.id,))
        row.update(status="processando", mensagem=None)  # as claimed, before completion
        for column in model.EXTRA_COLUMNS:  # not part of a claimed task's row
            if column not in model.CLAIMED_COLUMNS:
                del row[column]
        assert task.row == row
        assert (task.id, task.tentativa, task.dead, task.payload) == (
            row["id"],
            row["tentativa"],
            row["dead"],
            row["payload"],
        )
    settled = fetch_rows(pg_autocommit, pg_queue.table)
    assert {r["status"] for r in settled} == {"sucesso"}
    assert {r["mensagem"] for r in settled} == {"Concluído com sucesso"}
    # Prepared once on this connection, whatever the number of tasks.
    assert len(prepared_statements(worker_conn)) == 1


def test_a_latin1_session_stores_the_message_unchanged(
    store, worker_conn, pg_queue, pg_dsn, pg_autocommit
):
    worker_conn.execute("SET client_encoding TO 'LATIN1'")
    enqueue(pg_dsn, pg_queue.table, [dict(payload="a")])
    task = claim_first(store, worker_conn)
    complete(store, worker_conn, task, mensagem="Concluído: ação", claim_next=False)
    [row] = fetch_rows(pg_autocommit, pg_queue.table)
    assert row["mensagem"] == "Concluído: ação"


def test_a_handler_changing_the_client_encoding_is_followed(
    store, worker_conn, pg_queue, pg_dsn, pg_autocommit
):
    """Loaders are set up once per connection, but text must be read in the session's current encoding."""
    ids = enqueue(pg_dsn, pg_queue.table, [dict(payload=f"ação {n}") for n in range(3)])
    first = claim_first(store, worker_conn)
    second = complete(store, worker_conn, first, mensagem="ç utf8")
    worker_conn.execute("SET client_encoding TO 'LATIN1'")  # as a handler might, on bd_conn
    third = complete(store, worker_conn, second, mensagem="ç latin1")
    assert [t.payload for t in (first, second, third)] == ["ação 0", "ação 1", "ação 2"]
    complete(store, worker_conn, third, claim_next=False)
    assert [r["mensagem"] for r in fetch_rows(pg_autocommit, pg_queue.table)] == [
        "ç utf8",
        "ç latin1",
        "ok",
    ]
    assert [r["id"] for r in fetch_rows(pg_autocommit, pg_queue.table)] == ids


def test_a_message_that_cannot_be_sent_fails_before_anything_is_sent(
    store, worker_conn, pg_queue, pg_dsn, pg_autocommit
):
    """libpq would cut a text parameter at a NUL: refused instead (the executor replaces NULs first).

    Nothing reaches the server: the task is still 'processando', its lock held. As after
    any failed round trip, the store ends the task's transaction (the executor then
    records the failure in a transaction of its own) and the session stays usable.
    """
    enqueue(pg_dsn, pg_queue.table, [dict(payload="a"), dict(payload="b")])
    task = claim_first(store, worker_conn)
    with pytest.raises(DatabaseError) as info:
        complete(store, worker_conn, task, mensagem="nul \x00 inside")
    assert isinstance(info.value.__cause__, psycopg.DataError)
    [row] = fetch_rows(pg_autocommit, pg_queue.table, "id = %s", (task.id,))
    assert (row["status"], row["mensagem"]) == ("processando", None)
    assert worker_conn.pgconn.transaction_status == IDLE
    assert worker_conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
    worker_conn.execute("BEGIN")  # as the executor opens the transaction that settles it
    nxt = complete(store, worker_conn, task, mensagem="clean")
    complete(store, worker_conn, nxt, claim_next=False)
    assert [r["mensagem"] for r in fetch_rows(pg_autocommit, pg_queue.table)] == ["clean", "ok"]


def test_a_deallocated_statement_fails_one_round_trip_then_is_prepared_again(
    store, worker_conn, pg_queue, pg_dsn, pg_autocommit
):
    """A handler may run DISCARD ALL on bd_conn: one attempt fails, the next ones work."""
    enqueue(pg_dsn, pg_queue.table, [dict(payload=str(n)) for n in range(3)])
    first = claim_first(store, worker_conn)
    second = complete(store, worker_conn, first)
    worker_conn.execute(
        "DEALLOCATE ALL"
    )  # inside the second task's transaction, as a handler would
    with pytest.raises(DatabaseError) as info:
        complete(store, worker_conn, second)
    assert isinstance(info.value.__cause__, psycopg.errors.InvalidSqlStatementName)
    worker_conn.execute("ROLLBACK")
    worker_conn.execute("BEGIN")
    third = complete(store, worker_conn, second)
    assert complete(store, worker_conn, third) is None
    assert len(prepared_statements(worker_conn)) == 1
    assert {r["status"] for r in fetch_rows(pg_autocommit, pg_queue.table)} == {"sucesso"}


def test_discard_all_between_transactions_switches_to_the_unnamed_statement_at_no_cost(
    store, worker_conn, pg_queue, pg_dsn, pg_autocommit, caplog
):
    """A pooler's server_reset_query (DISCARD ALL), or its handing the next transaction to
    another server connection: the next claim finds no statement, and is run again unnamed."""
    enqueue(pg_dsn, pg_queue.table, [dict(payload=str(n)) for n in range(4)])
    first = claim_first(store, worker_conn)
    second = complete(store, worker_conn, first)
    assert complete(store, worker_conn, second, claim_next=False) is None
    worker_conn.execute("DISCARD ALL")  # between transactions, as PgBouncer resets a server
    with caplog.at_level("INFO", logger="nsj_queue_lib"):
        third = claim_first(store, worker_conn)
    assert "do not outlive a transaction" in caplog.text
    fourth = complete(store, worker_conn, third)
    assert complete(store, worker_conn, fourth) is None
    assert prepared_statements(worker_conn) == []  # unnamed from now on: nothing left behind
    assert {r["status"] for r in fetch_rows(pg_autocommit, pg_queue.table)} == {"sucesso"}
    assert worker_conn.pgconn.transaction_status == IDLE


def test_unnamed_calls_follow_a_changed_result_type(
    store, worker_conn, pg_queue, pg_dsn, pg_autocommit, pg_admin
):
    enqueue(pg_dsn, pg_queue.table, [dict(payload=str(n)) for n in range(3)])
    first = claim_first(store, worker_conn)
    assert complete(store, worker_conn, first, claim_next=False) is None
    worker_conn.execute("DISCARD ALL")
    second = claim_first(store, worker_conn)  # unnamed from now on
    worker_conn.execute("COMMIT")  # let the ALTER TABLE take its lock
    pg_admin.execute(f"ALTER TABLE {pg_queue.table} ALTER COLUMN prioridade TYPE numeric")
    worker_conn.execute("BEGIN")
    third = complete(store, worker_conn, second, mensagem="after")
    assert third is not None and third.row["payload"] == "2"
    assert isinstance(third.row["prioridade"], decimal.Decimal)  # the new type's loader
    assert complete(store, worker_conn, third) is None
    assert {r["status"] for r in fetch_rows(pg_autocommit, pg_queue.table)} == {"sucesso"}


def test_statement_names_never_repeat_across_clients(pg_queue):
    """Two workers' connections can share a pooler's server connection: never the same name."""
    sql = PostgresQueueStore(pg_queue.table).sql["claim_call"]
    names = {PreparedRoundTrip(sql, ["x"])._name_prefix for _ in range(2)}
    assert len(names) == 2


def test_a_changed_result_type_is_prepared_again_instead_of_failing_forever(
    store, worker_conn, pg_queue, pg_dsn, pg_autocommit, pg_admin
):
    """ALTER TABLE under running workers: each session fails one round trip, then adapts."""
    enqueue(pg_dsn, pg_queue.table, [dict(payload=str(n)) for n in range(3)])
    first = claim_first(store, worker_conn)
    second = complete(store, worker_conn, first)
    worker_conn.execute("COMMIT")  # let the ALTER TABLE take its lock
    pg_admin.execute(f"ALTER TABLE {pg_queue.table} ALTER COLUMN mensagem TYPE text")
    worker_conn.execute("BEGIN")
    with pytest.raises(DatabaseError) as info:
        complete(store, worker_conn, second)
    assert isinstance(
        info.value.__cause__, psycopg.errors.DatatypeMismatch
    )  # "attribute 14 has wrong type"
    worker_conn.execute("ROLLBACK")
    worker_conn.execute("BEGIN")
    third = complete(store, worker_conn, second)
    assert complete(store, worker_conn, third) is None
    assert {r["status"] for r in fetch_rows(pg_autocommit, pg_queue.table)} == {"sucesso"}


def test_a_broken_connection_is_a_database_error(store, worker_conn, pg_queue, pg_dsn, pg_admin):
    enqueue(pg_dsn, pg_queue.table, [dict(payload="a")])
    task = claim_first(store, worker_conn)
    pg_admin.execute("SELECT pg_terminate_backend(%s)", (worker_conn.info.backend_pid,))
    with pytest.raises(DatabaseError) as info:
        complete(store, worker_conn, task)
    assert isinstance(info.value.__cause__, psycopg.OperationalError)
    assert worker_conn.broken or worker_conn.closed


def test_an_interrupted_read_closes_the_session_instead_of_leaving_results_behind(
    store, worker_conn, pg_queue, pg_dsn, pg_autocommit, monkeypatch
):
    """Results left unread would be matched with the next statements: the session must end."""
    from nsj_queue_lib.db.postgres import wire

    enqueue(pg_dsn, pg_queue.table, [dict(payload="a"), dict(payload="b")])
    task = claim_first(store, worker_conn)
    real = wire.next_results
    calls = []

    def interrupted(pgconn):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("interrupted between two results")
        return real(pgconn)

    monkeypatch.setattr(wire, "next_results", interrupted)
    backend_pid = worker_conn.info.backend_pid
    with pytest.raises(RuntimeError):
        complete(store, worker_conn, task)
    assert worker_conn.closed
    monkeypatch.undo()
    # The server may have run the commit it had already received, or not: either
    # way the state is whole, and what is 'processando' has no session behind it
    # any more (the retry service's case).
    rows = {r["payload"]: r["status"] for r in fetch_rows(pg_autocommit, pg_queue.table)}
    assert rows in ({"a": "sucesso", "b": "processando"}, {"a": "processando", "b": "pendente"})
    # Closing the socket does not wait for the server: a loaded one ends the backend
    # (and frees its locks) a moment later.
    wait_until(
        lambda: (
            pg_autocommit.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (backend_pid,)
            ).fetchone()[0]
            == 0
        ),
        timeout=10,
        what="the closed session's backend to end",
    )
    assert (
        pg_autocommit.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s", (backend_pid,)
        ).fetchone()[0]
        == 0
    )


def test_a_failing_statement_reports_the_servers_error_class(worker_conn):
    call = PreparedRoundTrip("SELECT 1 / $1::int AS x", ["x"])
    worker_conn.execute("BEGIN")
    assert call.run(worker_conn, [1], b"COMMIT AND CHAIN") == [{"x": 1}]
    with pytest.raises(RoundTripError) as info:
        call.run(worker_conn, [0], b"COMMIT")
    assert isinstance(info.value.error, psycopg.errors.DivisionByZero)
    assert "division by zero" in str(info.value.error)
    assert info.value.rows == []
    worker_conn.execute("ROLLBACK")


def test_a_commit_that_fails_returns_the_rows_it_undid(worker_conn, pg_admin):
    pg_admin.execute("DROP TABLE IF EXISTS wire_deferred")
    pg_admin.execute("CREATE TABLE wire_deferred (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
    try:
        call = PreparedRoundTrip(
            "INSERT INTO wire_deferred (k) VALUES ($1::int), ($1::int) RETURNING k", ["k"]
        )
        worker_conn.execute("BEGIN")
        with pytest.raises(RoundTripError) as info:
            call.run(worker_conn, [7], b"COMMIT")
        assert isinstance(info.value.error, psycopg.errors.UniqueViolation)
        assert info.value.rows == [{"k": 7}, {"k": 7}]
        assert worker_conn.execute("SELECT count(*) FROM wire_deferred").fetchone()[0] == 0
    finally:
        pg_admin.execute("DROP TABLE IF EXISTS wire_deferred")


def test_parameters_are_typed_by_the_statement_and_none_is_null(worker_conn):
    call = PreparedRoundTrip(
        "SELECT $1::bigint AS big, $2::text AS txt, $3::boolean AS flag, $4::int IS NULL AS missing",
        ["big", "txt", "flag", "missing"],
    )
    worker_conn.execute("BEGIN")
    assert call.run(worker_conn, [2**40, "ação", True, None], b"COMMIT") == [
        {"big": 2**40, "txt": "ação", "flag": True, "missing": True}
    ]
    with pytest.raises(RoundTripError) as info:
        call.run(worker_conn, [1.5, "x", False, None], b"COMMIT")
    assert isinstance(info.value.error, psycopg.DataError) and "float" in str(info.value.error)
    assert worker_conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF


# -- the same round trips awaited on an event loop (the async executor) -----------------


def test_the_awaited_round_trips_claim_and_complete_as_the_blocking_ones(
    store, worker_conn, pg_queue, pg_dsn, pg_autocommit
):
    import asyncio

    enqueue(pg_dsn, pg_queue.table, [dict(payload="a"), dict(payload="b")])
    store.bind(worker_conn)

    async def drain() -> list[str]:
        seen = []
        claim = await store.claim_async(worker_conn)
        while claim is not None:
            seen.append(claim.task.payload)
            claim = await store.complete_and_claim_async(worker_conn, claim.task.id, "ok", True)
        return seen

    assert asyncio.run(drain()) == ["a", "b"]
    assert worker_conn.info.transaction_status == IDLE  # the empty claim's transaction ended
    rows = {
        r["payload"]: (r["status"], r["mensagem"])
        for r in fetch_rows(pg_autocommit, pg_queue.table)
    }
    assert rows == {"a": ("sucesso", "ok"), "b": ("sucesso", "ok")}


def test_a_cancelled_awaited_round_trip_closes_the_session_instead_of_leaving_results_behind(
    store, worker_conn, pg_queue, pg_dsn, pg_autocommit
):
    import asyncio

    enqueue(pg_dsn, pg_queue.table, [dict(payload="a"), dict(payload="b")])
    task = claim_first(store, worker_conn)

    async def cancel_mid_way() -> None:
        pending = asyncio.ensure_future(
            store.complete_and_claim_async(worker_conn, task.id, "ok", True)
        )
        await asyncio.sleep(0)  # sent; now waiting for the reply
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending

    asyncio.run(cancel_mid_way())
    assert worker_conn.closed
    rows = {r["payload"]: r["status"] for r in fetch_rows(pg_autocommit, pg_queue.table)}
    assert rows in ({"a": "sucesso", "b": "processando"}, {"a": "processando", "b": "pendente"})
