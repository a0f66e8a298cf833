"""The worker runtime in-process on real PostgreSQL: execute, fail, retry, dead letter, order, wake-ups.

Each test runs a ``WorkerBase`` with ``run_until_stopped(install_signal_handlers=False)``
in a thread (``InProcessWorker``) on a fresh queue, and reads the queue table from
an outside autocommit connection. Waits poll the database with deadlines.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time

import psycopg
import pytest

from nsj_queue_lib.db.dialect import CLAIM_ROUTINE_RELEASE
from nsj_queue_lib.db.postgres.dialect import CLAIM_FUNCTION_ARGS
from nsj_queue_lib.db_gen import render
from nsj_queue_lib.runtime.worker_runtime import EXIT_CONFIG_ERROR
from tests.helpers.databases import count_rows
from tests.helpers.processes import (
    InProcessWorker,
    enqueue,
    fetch_rows,
    function_worker,
    listening_backends,
    ready_tasks,
    settings_for,
    statuses,
    wait_for,
)


@pytest.fixture
def run_ok_and_fail(start_worker, pg_queue, pg_dsn, pg_autocommit):
    """``run_ok_and_fail(execute)`` -> (ok, fail): the ids of tasks "ok" and "fail" (payloads),
    once ``execute`` ran both, one succeeded and the other failed (its retry stays 'agendada')."""

    def run(execute) -> tuple[int, int]:
        start_worker(execute, queue_base_interval_retry=10)
        ok, failed = enqueue(pg_dsn, pg_queue.table, [dict(payload="ok"), dict(payload="fail")])
        wait_for(
            lambda: (
                statuses(pg_autocommit, pg_queue.table) == {"sucesso": 1, "falha": 1, "agendada": 1}
            ),
            10,
            "both tasks to settle",
        )
        return ok, failed

    return run


@pytest.fixture
def library_log(caplog):
    """``caplog`` at WARNING for the library's records (they propagate like any library's)."""
    caplog.set_level(logging.WARNING, logger="nsj_queue_lib")
    return caplog


def held_advisory_locks(conn, queue) -> int:
    """Advisory locks held by the worker's sessions (application_name nsj_queue_lib:<queue>)."""
    return conn.execute(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND a.application_name = %s",
        (f"nsj_queue_lib:{queue.name}",),
    ).fetchone()[0]


def assert_runs_the_next_task(dsn: str, queue, conn) -> None:
    """The worker goes on: a task enqueued now (payload "next") succeeds."""
    [task] = enqueue(dsn, queue.table, [dict(payload="next")])
    wait_for(
        lambda: fetch_rows(conn, queue.table, "id = %s", (task,))[0]["status"] == "sucesso",
        10,
        "the next task to succeed",
    )


def db_now(conn) -> datetime.datetime:
    return conn.execute("SELECT clock_timestamp()").fetchone()[0]


def seconds(delta: datetime.timedelta) -> float:
    return delta.total_seconds()


# -- success and failure ---------------------------------------------------------------


def test_success_commits_the_handlers_writes_with_sucesso(
    start_worker, pg_queue, pg_dsn, pg_autocommit, side
):
    seen = {}

    def execute(payload, tarefa, bd_conn):
        bd_conn.execute(
            f"INSERT INTO {side} (task_id, chave) VALUES (%s, %s)", (tarefa["id"], payload)
        )
        seen["transaction"] = bd_conn.info.transaction_status.name
        with psycopg.connect(pg_dsn, autocommit=True) as outside:  # sees committed rows only
            seen["exec_rows"] = outside.execute(f"SELECT count(*) FROM {side}").fetchone()[0]
            seen["status"] = outside.execute(
                f"SELECT status FROM {pg_queue.table} WHERE id = %s", (tarefa["id"],)
            ).fetchone()[0]
        return f"ok {payload}"

    worker = start_worker(execute)
    [task_id] = enqueue(pg_dsn, pg_queue.table, [dict(payload="hello", chave_externa="k1")])
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 1}, 10, "the task to succeed"
    )

    # While the handler ran its write was not committed and the task was 'processando'.
    assert seen == {"transaction": "INTRANS", "exec_rows": 0, "status": "processando"}
    [row] = fetch_rows(pg_autocommit, pg_queue.table)
    assert (row["id"], row["status"], row["mensagem"], row["tentativa"]) == (
        task_id,
        "sucesso",
        "ok hello",
        1,
    )
    assert row["reenfileirado"] is False and row["estouro_tentativas"] is False
    assert pg_autocommit.execute(f"SELECT task_id, chave FROM {side}").fetchall() == [
        (task_id, "hello")
    ]
    assert worker.stop() == 0


def test_messages_with_nul_characters_are_stored_with_a_replacement(
    run_ok_and_fail, pg_queue, pg_autocommit
):
    """PostgreSQL text cannot hold NUL: the message is kept, NUL replaced, the task still succeeds or fails."""

    def execute(payload, tarefa, bd_conn):
        if payload == "fail":
            raise RuntimeError("bad\x00byte")
        return "done\x00here"

    ok, bad = run_ok_and_fail(execute)
    assert (
        fetch_rows(pg_autocommit, pg_queue.table, "id = %s", (ok,))[0]["mensagem"]
        == "done\ufffdhere"
    )
    assert (
        fetch_rows(pg_autocommit, pg_queue.table, "id = %s", (bad,))[0]["mensagem"]
        == "RuntimeError: bad\ufffdbyte"
    )


def test_failures_retry_with_back_off_then_dead_letter(
    start_worker, pg_queue, pg_dsn, pg_autocommit, side
):
    """A raising handler: rollback, 'falha' + next attempt, and after QUEUE_MAX_RETRY the dead letter."""
    base_minutes = 0.005  # 0.3 s per attempt number
    calls, dead_calls = [], []

    def execute(payload, tarefa, bd_conn):
        at = bd_conn.execute("SELECT clock_timestamp()").fetchone()[0]
        calls.append(dict(id=tarefa["id"], tentativa=tarefa["tentativa"], payload=payload, at=at))
        bd_conn.execute(
            f"INSERT INTO {side} (task_id) VALUES (%s)", (tarefa["id"],)
        )  # must roll back
        raise RuntimeError(f"boom {tarefa['tentativa']}")

    def execute_dead(payload, tarefa, bd_conn):
        dead_calls.append(
            dict(payload=payload, dead=tarefa["dead"], live_id=tarefa["live_id"], id=tarefa["id"])
        )
        return "dead handled"

    worker = start_worker(
        execute,
        execute_dead,
        queue_max_retry=3,
        queue_base_interval_retry=base_minutes,
        queue_wait_notify_interval=0.1,
    )
    [first_id] = enqueue(pg_dsn, pg_queue.table, [dict(payload='{"n": 1}', chave_externa="chain")])
    wait_for(
        lambda: count_rows(pg_autocommit, pg_queue.table, "dead AND status = 'sucesso'") == 1,
        15,
        "the dead-letter task to be handled",
    )

    rows = fetch_rows(pg_autocommit, pg_queue.table)
    attempts = [r for r in rows if not r["dead"]]
    [dead] = [r for r in rows if r["dead"]]
    assert [r["tentativa"] for r in attempts] == [1, 2, 3]
    assert [c["tentativa"] for c in calls] == [1, 2, 3]
    # Every attempt ran with the first attempt's payload; later rows store none.
    assert [c["payload"] for c in calls] == ['{"n": 1}'] * 3
    assert [r["payload"] for r in attempts] == ['{"n": 1}', None, None]
    # Nothing a failed handler wrote was committed.
    assert pg_autocommit.execute(f"SELECT count(*) FROM {side}").fetchone()[0] == 0

    for number, (row, call) in enumerate(zip(attempts, calls, strict=True), start=1):
        assert row["id"] == call["id"]
        assert row["status"] == "falha"
        assert f"boom {number}" in row["mensagem"] and "RuntimeError" in row["mensagem"]
        assert row["data_hora_inicial"] == attempts[0]["data_hora_inicial"]
        assert row["origem"] == "teste" and row["chave_externa"] == "chain"
        if number > 1:
            assert row["id_inicial"] == first_id
    for row, nxt, call in zip(attempts, attempts[1:], calls, strict=False):
        assert row["reenfileirado"] is True
        assert row["estouro_tentativas"] is False
        assert row["proxima_tentativa"] == nxt["data_hora"]
        assert nxt["tentativa"] == row["tentativa"] + 1
        assert nxt["id_anterior"] == row["id"]
        assert nxt["data_hora_anterior"] == row["data_hora"]
        assert nxt["status_anterior"] == "falha"
        assert nxt["mensagem_anterior"] == row["mensagem"]
        # Due tentativa * QUEUE_BASE_INTERVAL_RETRY minutes after the failure, which
        # came just after the handler started.
        delay = row["tentativa"] * base_minutes * 60
        waited = seconds(nxt["data_hora"] - call["at"])
        assert delay <= waited <= delay + 0.25, (row["tentativa"], waited)
        # And it did not run before that.
        assert calls[nxt["tentativa"] - 1]["at"] >= nxt["data_hora"]

    last = attempts[-1]
    assert last["estouro_tentativas"] is True
    assert "maximum of 3 attempts" in last["mensagem"]
    assert last["proxima_tentativa"] is None
    assert dead["live_id"] == first_id and dead["tentativa"] == 1
    assert dead["status"] == "sucesso" and dead["mensagem"] == "dead handled"
    assert dead_calls == [dict(payload='{"n": 1}', dead=True, live_id=first_id, id=dead["id"])]
    assert len(rows) == 4  # nothing after the dead letter
    assert held_advisory_locks(pg_autocommit, pg_queue) == 0
    assert worker.stop() == 0


def test_a_dead_letter_that_keeps_failing_ends_without_another(
    start_worker, pg_queue, pg_dsn, pg_autocommit
):
    def fail(payload, tarefa, bd_conn):
        raise RuntimeError("dead" if tarefa["dead"] else "live")

    start_worker(fail, fail, queue_max_retry=2, queue_wait_notify_interval=0.2)
    [first] = enqueue(pg_dsn, pg_queue.table, [dict(payload="x")])
    wait_for(
        lambda: count_rows(pg_autocommit, pg_queue.table, "dead AND estouro_tentativas") == 1,
        10,
        "the dead letter's last attempt to fail",
    )
    rows = fetch_rows(pg_autocommit, pg_queue.table)
    assert [(r["dead"], r["tentativa"], r["status"]) for r in rows] == [
        (False, 1, "falha"),
        (False, 2, "falha"),
        (True, 1, "falha"),
        (True, 2, "falha"),
    ]
    assert all(r["live_id"] == first for r in rows if r["dead"])
    assert "maximum of 2 attempts" in rows[-1]["mensagem"]


@pytest.mark.parametrize("exception", [SystemExit, KeyboardInterrupt])
def test_system_exit_and_keyboard_interrupt_fail_the_task_and_the_worker_goes_on(
    exception, start_worker, pg_queue, pg_dsn, pg_autocommit
):
    def execute(payload, tarefa, bd_conn):
        if payload == "raise":
            raise exception(3) if exception is SystemExit else exception()
        return "fine"

    worker = start_worker(execute, queue_base_interval_retry=10)  # the retry stays 'agendada'
    [bad] = enqueue(pg_dsn, pg_queue.table, [dict(payload="raise")])
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"falha": 1, "agendada": 1},
        10,
        f"the {exception.__name__} to fail the task",
    )
    [failed, retry] = fetch_rows(pg_autocommit, pg_queue.table)
    assert failed["id"] == bad and exception.__name__ in failed["mensagem"]
    assert failed["reenfileirado"] is True
    assert (retry["id_anterior"], retry["tentativa"]) == (bad, 2)

    # The worker still runs and still executes tasks.
    assert worker.alive()
    assert_runs_the_next_task(pg_dsn, pg_queue, pg_autocommit)
    assert "processando" not in statuses(pg_autocommit, pg_queue.table)
    assert worker.stop() == 0


# -- order and time -----------------------------------------------------------------------


def test_ready_tasks_are_claimed_at_start_by_priority_then_age(
    start_worker, pg_queue, pg_dsn, pg_autocommit
):
    """Tasks ready before the worker starts run without any notification, in claim order."""
    enqueue(pg_dsn, pg_queue.table, ready_tasks(db_now(pg_autocommit)))
    order: list[str] = []
    # The notifications of those inserts reached nobody; the interval is long, so
    # only the start-up claim can find the tasks.
    worker = start_worker(
        lambda payload, tarefa, conn: order.append(payload),
        queue_wait_notify_interval=60,
        queue_concurrency=1,
        wait_listening=False,
    )
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 6},
        10,
        "all six tasks to succeed",
    )
    assert order == ["E", "C", "B", "F", "A", "D"]
    assert worker.runtime.dispatcher.notifications == 0
    worker.stop()


def test_a_notification_wakes_an_idle_worker(start_worker, pg_queue, pg_dsn, pg_autocommit):
    worker = start_worker(lambda payload, tarefa, conn: "ok", queue_wait_notify_interval=60)
    enqueue(pg_dsn, pg_queue.table, [dict(payload="x")])
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 1},
        3,
        "the task to run on its notification (the timeout is 60 s)",
    )
    assert worker.runtime.dispatcher.notifications >= 1
    worker.stop()


def test_a_task_due_later_never_runs_before_its_time(start_worker, pg_queue, pg_dsn, pg_autocommit):
    due = db_now(pg_autocommit) + datetime.timedelta(seconds=1.0)
    [task_id] = enqueue(pg_dsn, pg_queue.table, [dict(payload="later", data_hora=due)])
    started = []

    def execute(payload, tarefa, bd_conn):
        started.append(bd_conn.execute("SELECT clock_timestamp()").fetchone()[0])

    start_worker(execute, queue_wait_notify_interval=60)
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 1},
        5,
        "the scheduled task to run",
    )
    assert started[0] >= due
    assert seconds(started[0] - due) < 0.5, (
        "the worker knew when the task was due and should run it then"
    )


def test_a_task_scheduled_while_the_worker_waits_runs_when_due(
    start_worker, pg_queue, pg_dsn, pg_autocommit
):
    """The worker is idle with a long timeout; a task due in 0.5 s must not wait for that timeout."""
    started = []
    start_worker(
        lambda payload, tarefa, conn: started.append(
            conn.execute("SELECT clock_timestamp()").fetchone()[0]
        ),
        queue_wait_notify_interval=10,
    )
    due = db_now(pg_autocommit) + datetime.timedelta(seconds=0.5)
    enqueue(pg_dsn, pg_queue.table, [dict(payload="later", data_hora=due)])
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 1},
        3,
        "the task to run within 2.5 s of its data_hora (the timeout is 10 s)",
    )
    assert due <= started[0]
    assert seconds(started[0] - due) < 0.5


def test_a_retry_runs_when_it_is_due(start_worker, pg_queue, pg_dsn, pg_autocommit):
    started = []

    def execute(payload, tarefa, bd_conn):
        started.append(bd_conn.execute("SELECT clock_timestamp()").fetchone()[0])
        if tarefa["tentativa"] == 1:
            raise RuntimeError("first attempt fails")
        return "second attempt"

    start_worker(
        execute, queue_base_interval_retry=0.005, queue_wait_notify_interval=10
    )  # due in 0.3 s
    enqueue(pg_dsn, pg_queue.table, [dict(payload="x")])
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"falha": 1, "sucesso": 1},
        3,
        "the retry (due 0.3 s after the failure; the timeout is 10 s) to succeed",
    )
    retry = fetch_rows(pg_autocommit, pg_queue.table, "tentativa = 2")[0]
    assert retry["data_hora"] <= started[1]
    assert seconds(started[1] - retry["data_hora"]) < 0.5


def test_a_task_inserted_without_its_trigger_is_still_processed(
    start_worker, pg_queue, pg_dsn, pg_autocommit, pg_admin
):
    """No notification at all: the dispatcher's timeout (QUEUE_WAIT_NOTIFY_INTERVAL) finds it."""
    worker = start_worker(lambda payload, tarefa, conn: "ok", queue_wait_notify_interval=0.5)
    enqueue(pg_dsn, pg_queue.table, [dict(payload="canary")])
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 1},
        5,
        "the canary (worker up)",
    )
    notified = worker.runtime.dispatcher.notifications
    pg_admin.execute(f"ALTER TABLE {pg_queue.table} DISABLE TRIGGER USER")
    try:
        enqueue(pg_dsn, pg_queue.table, [dict(payload="silent")])
        wait_for(
            lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 2},
            5,
            "the task inserted without a notification to run",
        )
    finally:
        pg_admin.execute(f"ALTER TABLE {pg_queue.table} ENABLE TRIGGER USER")
    assert worker.runtime.dispatcher.notifications == notified
    worker.stop()


def test_concurrent_executors_run_each_task_once(
    start_worker, pg_queue, pg_dsn, pg_autocommit, side
):
    running, peak, lock = [0], [0], threading.Lock()

    def execute(payload, tarefa, bd_conn):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            bd_conn.execute(f"INSERT INTO {side} (task_id) VALUES (%s)", (tarefa["id"],))
            time.sleep(0.05)
        finally:
            with lock:
                running[0] -= 1

    start_worker(execute, queue_concurrency=4)
    enqueue(pg_dsn, pg_queue.table, [dict(payload=str(i)) for i in range(40)])
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 40},
        15,
        "40 tasks to succeed",
    )
    counts = pg_autocommit.execute(
        f"SELECT count(*), count(DISTINCT task_id) FROM {side}"
    ).fetchone()
    assert counts == (40, 40)
    assert peak[0] == 4  # QUEUE_CONCURRENCY tasks at once, never more
    assert held_advisory_locks(pg_autocommit, pg_queue) == 0  # every liveness lock was released


# -- handlers that misbehave -----------------------------------------------------------------


def test_savepoints_in_a_handler_commit_or_roll_back_with_the_task(
    run_ok_and_fail, pg_queue, pg_autocommit, side
):
    def execute(payload, tarefa, bd_conn):
        with bd_conn.transaction():  # a savepoint inside the task's transaction
            bd_conn.execute(
                f"INSERT INTO {side} (task_id, chave) VALUES (%s, 'kept')", (tarefa["id"],)
            )
        try:
            with bd_conn.transaction():
                bd_conn.execute(
                    f"INSERT INTO {side} (task_id, chave) VALUES (%s, 'undone')", (tarefa["id"],)
                )
                raise ValueError("roll back this block only")
        except ValueError:
            pass
        if payload == "fail":
            raise RuntimeError("the whole task fails")
        return "x" * 2000

    ok, failed = run_ok_and_fail(execute)
    assert pg_autocommit.execute(f"SELECT task_id, chave FROM {side}").fetchall() == [(ok, "kept")]
    row = fetch_rows(pg_autocommit, pg_queue.table, "id = %s", (ok,))[0]
    assert row["mensagem"].startswith("xxx") and len(row["mensagem"]) <= 500  # fits the column


@pytest.mark.parametrize("misbehaviour", ["close", "terminate", "sql-error", "swallowed-error"])
def test_a_handler_that_breaks_its_connection_fails_its_task_and_the_worker_goes_on(
    misbehaviour, start_worker, pg_queue, pg_dsn, pg_autocommit, pg_admin
):
    def execute(payload, tarefa, bd_conn):
        if payload != "bad" or tarefa["tentativa"] > 1:
            return "fine"
        if misbehaviour == "close":
            bd_conn.close()
        elif misbehaviour == "terminate":
            pg_admin.execute("SELECT pg_terminate_backend(%s)", (bd_conn.info.backend_pid,))
        elif misbehaviour == "sql-error":
            bd_conn.execute("SELECT * FROM no_such_table_here")
        else:  # the statement failed, the handler ignored it: the transaction cannot commit
            try:
                bd_conn.execute("SELECT 1 / 0")
            except psycopg.Error:
                pass
        return "pretends to be fine"

    worker = start_worker(execute, queue_base_interval_retry=10, queue_concurrency=1)
    [bad] = enqueue(pg_dsn, pg_queue.table, [dict(payload="bad")])
    # A terminated session looks like an administrator's or a failover's: the attempt is
    # released and retried at once (docs/how-to/connect.md), not failed with a back-off.
    expected = (
        {"falha_processando": 1, "sucesso": 1}
        if misbehaviour == "terminate"
        else {"falha": 1, "agendada": 1}
    )
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == expected,
        10,
        "the task to fail",
    )
    assert fetch_rows(pg_autocommit, pg_queue.table, "id = %s", (bad,))[0]["reenfileirado"] is True
    assert_runs_the_next_task(pg_dsn, pg_queue, pg_autocommit)
    assert worker.stop() == 0


@pytest.mark.parametrize("batch_size", [1, None])
def test_a_commit_that_fails_fails_the_task_and_returns_the_next_claim_unlocked(
    batch_size, start_worker, pg_queue, pg_dsn, pg_autocommit, pg_admin
):
    """The next task is claimed in the finished task's transaction: when that commit fails, both go.

    A deferred unique constraint makes the first task's commit fail after its
    success row and the claim of the second task were written. The second
    task must be 'pendente' again and its liveness lock released: the same
    session claims it once more, and a lock taken twice would outlive it.
    QUEUE_BATCH_SIZE=1: the one-commit path. Unset (group commit): both tasks
    are claimed in one group whose commit fails; they go back to the queue
    without an attempt, run alone, and only the culprit's commit fails.
    """
    deferred = f"{pg_queue.table}_deferred"
    pg_admin.execute(
        f"CREATE TABLE {deferred} (k int, CONSTRAINT {pg_queue.name}_deferred_k UNIQUE (k) "
        "DEFERRABLE INITIALLY DEFERRED)"
    )
    try:

        def execute(payload, tarefa, bd_conn):
            if payload == "bad":
                bd_conn.execute(f"INSERT INTO {deferred} (k) VALUES (1), (1)")  # fails at COMMIT
            return "fine"

        bad, good = enqueue(
            pg_dsn, pg_queue.table, [dict(payload="bad", prioridade=90), dict(payload="good")]
        )
        worker = start_worker(
            execute,
            queue_base_interval_retry=60,
            queue_concurrency=1,
            queue_batch_size=batch_size,
        )
        wait_for(
            lambda: (
                statuses(pg_autocommit, pg_queue.table) == {"falha": 1, "agendada": 1, "sucesso": 1}
            ),
            10,
            "the failed commit to be recorded and the other task to succeed",
        )
        [row] = fetch_rows(pg_autocommit, pg_queue.table, "id = %s", (bad,))
        assert row["status"] == "falha" and "deferred_k" in row["mensagem"]
        assert (
            fetch_rows(pg_autocommit, pg_queue.table, "id = %s", (good,))[0]["status"] == "sucesso"
        )
        assert pg_autocommit.execute(f"SELECT count(*) FROM {deferred}").fetchone()[0] == 0
        assert held_advisory_locks(pg_autocommit, pg_queue) == 0
        assert worker.stop() == 0
    finally:
        pg_admin.execute(f"DROP TABLE IF EXISTS {deferred}")


@pytest.mark.parametrize("synchronous", [True, False])
def test_queue_synchronous_commit_sets_the_task_transactions_durability(
    synchronous, start_worker, pg_queue, pg_dsn, pg_autocommit, side
):
    seen = []

    def execute(payload, tarefa, bd_conn):
        seen.append(bd_conn.execute("SHOW synchronous_commit").fetchone()[0])
        bd_conn.execute(f"INSERT INTO {side} (task_id, chave) VALUES (%s, 'x')", (tarefa["id"],))

    start_worker(execute, queue_synchronous_commit=synchronous)
    ids = enqueue(pg_dsn, pg_queue.table, [dict(payload=str(n)) for n in range(3)])
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 3},
        10,
        "the tasks to succeed",
    )
    assert seen == ["on" if synchronous else "off"] * 3
    assert (
        sorted(r[0] for r in pg_autocommit.execute(f"SELECT task_id FROM {side}").fetchall()) == ids
    )


def drop_claim_function(pg_admin, queue) -> None:
    pg_admin.execute(
        f"DROP FUNCTION {queue.schema}.claim_next_{queue.name}_v{CLAIM_ROUTINE_RELEASE}"
    )


def comment_claim_function(pg_admin, queue, version: str) -> None:
    pg_admin.execute(
        f"COMMENT ON FUNCTION {queue.schema}.claim_next_{queue.name}_v{CLAIM_ROUTINE_RELEASE}"
        f"{CLAIM_FUNCTION_ARGS} IS '{version}'"
    )


@pytest.mark.parametrize("routine", ["missing", "another version"])
def test_a_queue_without_this_versions_claim_function_is_refused_at_start(
    routine, pg_queue, pg_dsn, pg_admin, pg_autocommit, library_log
):
    """Queues made before the claim function existed, or whose DDL is another version's, are
    refused at start (exit code 2) with the command that brings them up to date: a worker
    never claims with SQL its database does not have."""
    if routine == "missing":
        drop_claim_function(pg_admin, pg_queue)
    else:
        comment_claim_function(pg_admin, pg_queue, "nsj_queue_lib claim 0000000000000000")
    [task] = enqueue(pg_dsn, pg_queue.table, [dict(payload="waits")])
    calls = []
    worker = function_worker(
        settings_for(pg_dsn, pg_queue.table), lambda payload, tarefa, bd_conn: calls.append(1)
    )
    assert worker.run_until_stopped(install_signal_handlers=False) == EXIT_CONFIG_ERROR
    message = worker._runtime.exit_message
    assert (
        f"claim_next_{pg_queue.name}_v{CLAIM_ROUTINE_RELEASE}" in message and "--upgrade" in message
    ), message
    if routine == "missing":
        assert "is missing" in message
    else:
        assert "another version" in message and "0000000000000000" in message
    assert [r.getMessage() for r in library_log.records if r.levelname == "ERROR"] == [
        f"queue={pg_queue.name}: {message}"
    ]
    assert calls == []
    assert fetch_rows(pg_autocommit, pg_queue.table, "id = %s", (task,))[0]["status"] == "pendente"


def test_dropping_the_claim_function_under_a_running_worker_holds_the_tasks_until_it_is_back(
    start_worker, pg_queue, pg_dsn, pg_autocommit, pg_admin, library_log
):
    """Without the function no claim succeeds: the tasks wait, 'pendente', none fails, none is
    lost; once the function is back (db_gen --upgrade) every task runs."""
    start_worker(lambda payload, tarefa, bd_conn: None, queue_concurrency=1)
    enqueue(pg_dsn, pg_queue.table, [dict(payload="before")])
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 1}, 10, "the first task"
    )
    drop_claim_function(pg_admin, pg_queue)
    ids = enqueue(pg_dsn, pg_queue.table, [dict(payload=str(n)) for n in range(5)])

    def claim_failures() -> list[str]:
        return [
            r.getMessage()
            for r in library_log.records
            if "claim failed" in r.getMessage()
            and f"claim_next_{pg_queue.name}_v{CLAIM_ROUTINE_RELEASE}" in r.getMessage()
        ]

    wait_for(claim_failures, 10, "the worker's claim to meet the missing function")
    assert statuses(pg_autocommit, pg_queue.table) == {"sucesso": 1, "pendente": 5}
    pg_admin.execute(render(pg_queue.schema, pg_queue.name, upgrade=True))
    ids += enqueue(pg_dsn, pg_queue.table, [dict(payload="after the upgrade")])
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 7},
        15,
        "every task to succeed once the function is back",
    )
    assert held_advisory_locks(pg_autocommit, pg_queue) == 0


def test_successive_claims_follow_priority_then_age(start_worker, pg_queue, pg_dsn, pg_autocommit):
    """After the first claim every next task comes from the completion's claim (the function's)."""
    order = []

    def execute(payload, tarefa, bd_conn):
        order.append(payload)

    tasks = [
        dict(payload="low-old", prioridade=10),
        dict(payload="high-old", prioridade=90),
        dict(payload="mid", prioridade=50),
        dict(payload="high-new", prioridade=90),
        dict(payload="low-new", prioridade=10),
    ]
    enqueue(pg_dsn, pg_queue.table, tasks)  # one transaction, before the worker starts
    start_worker(execute, queue_concurrency=1)
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"sucesso": 5},
        10,
        "the tasks to succeed",
    )
    assert order == ["high-old", "high-new", "mid", "low-old", "low-new"]


# -- supervised threads -------------------------------------------------------------------------


class ThreadKilled(BaseException):
    """Nothing in a thread's loop catches it: the thread ends."""


def kill_thread(monkeypatch, thread: str) -> str:
    """Make one of the worker's threads end at its first step; the name of that thread."""
    from nsj_queue_lib.db.postgres.store import PostgresQueueStore
    from nsj_queue_lib.runtime.renotify import RenotifyService
    from nsj_queue_lib.runtime.tokens import WakeTokens

    if thread == "dispatcher":
        # A bug, not an outage: the dispatcher's loop lets it through.
        def promote_due(self, conn, limit):
            raise RuntimeError("a bug in the dispatcher's first step")

        monkeypatch.setattr(PostgresQueueStore, "promote_due", promote_due)
        return "nsj-dispatcher"
    if thread == "service":

        def work(self, conn):
            raise ThreadKilled("the renotify service's run ends its thread")

        monkeypatch.setattr(RenotifyService, "work", work)
        return "nsj-renotify"
    take_token = WakeTokens.take

    def take_token_or_die(self, timeout=None):
        if threading.current_thread().name == "nsj-executor-1":
            raise ThreadKilled("an executor thread ends")
        return take_token(self, timeout)

    monkeypatch.setattr(WakeTokens, "take", take_token_or_die)
    return "nsj-executor-1"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("thread", ["dispatcher", "service", "executor"])
def test_a_thread_that_dies_stops_the_worker_with_exit_code_3_naming_it(
    thread, monkeypatch, library_log, pg_queue, pg_dsn, pg_autocommit
):
    from nsj_queue_lib.runtime.worker_runtime import EXIT_THREAD_DIED

    name = kill_thread(monkeypatch, thread)
    settings = settings_for(
        pg_dsn, pg_queue.table, queue_concurrency=2, queue_notify_thread_interval=0.05
    )
    worker = InProcessWorker(function_worker(settings, lambda payload, tarefa, bd_conn: None))
    worker.start()
    wait_for(lambda: not worker.alive(), 15, f"the worker to stop once {name} died")
    assert worker.error is None
    assert worker.exit_code == EXIT_THREAD_DIED == 3
    assert worker.worker._runtime.exit_message == f"thread {name} ended unexpectedly"
    errors = [r.getMessage() for r in library_log.records if r.levelname == "ERROR"]
    assert f"queue={pg_queue.name}: thread {name} ended unexpectedly; stopping the worker" in (
        errors
    ), errors
    # The rest of the worker stopped with it.
    runtime = worker.worker._runtime
    assert runtime.stop_event.is_set()
    assert listening_backends(pg_autocommit, pg_queue.name) == 0
