"""Process instances (issue 42; CONTRACT.md section 8) on PostgreSQL, MariaDB and through
the socket server.

A process's tasks run one at a time in claim order, each with the process's state,
status and detail (saved with its commit), events, a pending timer that a later one
replaces, and retention (``remove_after``); a task that fails for good corrupts the
process until a repair succeeds. In-process workers (``workers/process_worker.py``),
a worker process where kill -9 is the point.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from nsj_queue_lib.exceptions import NotFoundError, ProcessCorruptedError, ProcessExistsError
from tests.contract.test_async_handlers import BOTH, RETRY_BASE_MINUTES
from tests.contract.test_durable_steps import WITH_SERVER
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)

PROCESS_WORKER = Path(__file__).resolve().parent / "workers" / "process_worker.py"


def process_worker(backend, **changes):
    from tests.contract.workers.process_worker import ProcessContractWorker

    return ProcessContractWorker(
        backend.settings(**changes),
        exec_table=backend.exec_table,
        started_table=backend.started_table,
        ready_file="",
    )


def start(backend, process_id, processo="count", **spec) -> int:
    with backend.transaction() as conn:
        return backend.client(conn).start_process(process_id, processo, json.dumps(spec))


def call(backend, process_id, processo="count", **spec) -> int:
    with backend.transaction() as conn:
        return backend.client(conn).call_process(process_id, processo, json.dumps(spec))


def get_process(backend, process_id, **kwargs):
    with backend.transaction() as conn:
        return backend.client(conn).get_process(process_id, **kwargs)


def chaves(backend) -> list[str]:
    return [
        r["chave"] for r in backend.query(f"SELECT chave FROM {backend.exec_table} ORDER BY at")
    ]


def intervals(backend) -> dict[int, tuple]:
    """{task id: (its -start row's time, its -end row's time)}."""
    rows = backend.query(f"SELECT task_id, chave, at FROM {backend.exec_table}")
    found: dict[int, dict] = {}
    for row in rows:
        found.setdefault(row["task_id"], {})[row["chave"].rsplit("-", 1)[1]] = row["at"]
    return {task: (marks["start"], marks["end"]) for task, marks in found.items() if "end" in marks}


@WITH_SERVER
def test_calls_from_four_clients_run_one_at_a_time_in_order_with_no_lost_update(backend):
    """100 calls to one process from 4 concurrent clients, 4 executors: never two at once,
    in claim order, the state updated 100 times."""
    start(backend, "p-1", seq=0)
    running = backend.run(process_worker(backend, queue_concurrency=4))
    errors: list[BaseException] = []

    def client(first: int) -> None:
        try:
            for seq in range(first, first + 25):
                call(backend, "p-1", seq=seq)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(1 + 25 * i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    backend.wait_statuses({"sucesso": 101}, 60, "the 101 tasks of the process")
    assert running.stop() == 0
    process = get_process(backend, "p-1", events=200, tasks=200)
    assert process["state"]["n"] == 101
    assert sorted(process["state"]["seen"]) == list(range(101))
    # In claim order: the order the tasks were claimed in is the order they saw the state.
    claimed = sorted(backend.rows(), key=lambda r: (r["started_at"], r["id"]))
    assert [json.loads(r["payload"])["seq"] for r in claimed] == process["state"]["seen"]
    spans = sorted(intervals(backend).values())
    assert len(spans) == 101
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:], strict=False))
    assert [e["payload"]["n"] for e in process["events"]] == list(range(1, 102))
    assert process["status"] == "counting" and process["detail"] == "101 calls"
    # Listed by id; the clients' concurrent commits make claim order differ from id order.
    responses = sorted(t["response"]["n"] for t in process["tasks"])
    assert responses == list(range(1, 102))
    assert {t["kind"] for t in process["tasks"]} == {"start", "call"}


@BOTH
def test_calls_to_fifty_processes_run_in_parallel(backend):
    for i in range(50):
        start(backend, f"p-{i}", sleep=0.2)
    running = backend.run(process_worker(backend, queue_concurrency=8))
    backend.wait_statuses({"sucesso": 50}, 60, "a task of each of the 50 processes")
    assert running.stop() == 0
    spans = list(intervals(backend).values())
    most = max(sum(1 for s, e in spans if s <= at < e) for at, _ in spans)
    assert most >= 4  # of the 8 executors, not one at a time
    assert all(get_process(backend, f"p-{i}")["state"]["n"] == 1 for i in range(50))


@WITH_SERVER
def test_a_timer_replaced_by_a_later_one_fires_once_the_later_one(backend):
    start(backend, "t-1")
    first = call(backend, "t-1", "arm", **{"in": 30, "label": "first"})
    second = call(backend, "t-1", "arm", **{"in": 0.5, "label": "second"})
    running = backend.run(process_worker(backend))
    wait_for(lambda: "t-1-fired:second" in chaves(backend), 20, "the later timer to fire")
    time.sleep(0.5)
    assert running.stop() == 0
    assert chaves(backend).count("t-1-fired:second") == 1
    assert "t-1-fired:first" not in chaves(backend)
    timers = {
        json.loads(r["payload"])["label"]: r for r in backend.rows("processo = %s", ("fire",))
    }
    assert timers["first"]["status"] == "cancelada"
    assert timers["second"]["status"] == "sucesso"
    with backend.transaction() as conn:
        client = backend.client(conn)
        assert client.call_response(first) == timers["first"]["id"]
        assert client.call_response(second) == timers["second"]["id"]
    process = get_process(backend, "t-1")
    assert process["timers"] == []
    fired = [e for e in process["events"] if e["event_type"] == "fired"]
    assert [e["payload"] for e in fired] == ["second"]


@BOTH
def test_a_pending_timer_is_listed_by_get_process(backend):
    start(backend, "t-2")
    call(backend, "t-2", "arm", **{"in": 60, "label": "later"})
    running = backend.run(process_worker(backend))
    backend.wait_statuses({"sucesso": 2, "pendente": 1}, 20, "the start and the arming call")
    assert running.stop() == 0
    [timer] = get_process(backend, "t-2")["timers"]
    assert (
        timer["processo"] == "fire" and timer["status"] == "pendente" and timer["kind"] == "timer"
    )


@BOTH
def test_remove_after_deletes_the_process_its_history_and_cancels_its_timer(backend):
    from nsj_queue_lib.runtime.purge import PurgeService
    from tests.helpers import services

    start(backend, "r-1")
    call(backend, "r-1", "arm", **{"in": 60, "label": "never"})
    call(backend, "r-1", "retire", after=0)
    start(backend, "r-keep")
    running = backend.run(process_worker(backend))
    backend.wait_statuses({"sucesso": 4, "pendente": 1}, 20, "the calls (the timer waits)")
    assert running.stop() == 0
    assert get_process(backend, "r-1")["remove_at"] is not None
    services.make_service(PurgeService, backend.settings()).run_once()
    assert get_process(backend, "r-1") is None
    assert get_process(backend, "r-keep") is not None
    [timer] = backend.rows("processo = %s", ("fire",))
    assert timer["status"] == "cancelada" and "removed" in timer["mensagem"]
    for table in ("process_tasks", "process_events"):
        assert not backend.query(
            f"SELECT * FROM {backend.table}_{table} WHERE process_id = %s", ("r-1",)
        )
    with pytest.raises(NotFoundError):
        call(backend, "r-1")


@BOTH
def test_a_killed_call_is_retried_and_its_state_and_events_are_written_once(backend):
    from nsj_queue_lib.runtime.retry import RetryService
    from tests.helpers import services

    start(backend, "k-1")
    victim = backend.start_process("victim", script=PROCESS_WORKER)
    backend.wait_statuses({"sucesso": 1}, 15, "the start")
    task_id = call(backend, "k-1", hang=True, seq=1)
    wait_for(lambda: backend.row(task_id)["status"] == "processando", 15, "the call to start")
    time.sleep(0.5)  # its writes are done, uncommitted: it sleeps before returning
    assert not services.make_service(RetryService, backend.settings()).run_once()
    victim.kill9()
    rescuer = backend.run(
        process_worker(
            backend, queue_retry_thread_interval=0.3, queue_base_interval_retry=RETRY_BASE_MINUTES
        )
    )
    backend.wait_statuses(
        {"sucesso": 2, "falha_processando": 1}, 30, "the rescue and the retried call"
    )
    assert rescuer.stop() == 0
    process = get_process(backend, "k-1")
    assert process["state"] == {"n": 2, "seen": [None, 1]}
    assert [e["payload"]["seq"] for e in process["events"]] == [None, 1]
    assert sorted(chaves(backend)) == ["k-1-end", "k-1-end", "k-1-start", "k-1-start"]


@WITH_SERVER
def test_wait_for_task_returns_a_call_and_call_response_its_result(backend):
    start(backend, "w-1")
    running = backend.run(process_worker(backend))
    task_id = call(backend, "w-1", seq=1)
    conn = backend.connect(autocommit=backend.family == "postgres")
    try:
        client = backend.client(conn)
        done = client.wait_for_task(task_id, 20)
        assert done["status"] == "sucesso"
        assert client.call_response(task_id) == {"n": 2}
    finally:
        conn.close()
    assert running.stop() == 0


@WITH_SERVER
def test_a_dead_lettered_call_corrupts_the_process_until_a_repair_succeeds(backend):
    start(backend, "c-1")
    broke = call(backend, "c-1", "break")
    behind = call(backend, "c-1", seq=7)  # queued before the corruption: cancelled
    running = backend.run(process_worker(backend))
    wait_for(lambda: backend.row(behind)["status"] == "cancelada", 20, "the call behind it")
    process = get_process(backend, "c-1")
    assert process["corrupted"] and process["corrupted_by"] == broke
    assert process["status"] == "corrupted"
    assert "refused the call" in process["detail"]
    assert "corrupted" in backend.row(behind)["mensagem"]
    with pytest.raises(ProcessCorruptedError):
        call(backend, "c-1", seq=8)
    with backend.transaction() as conn, pytest.raises(ProcessCorruptedError):
        backend.client(conn).insert_task("o", "d", "count", None, "{}", process_id="c-1")
    with backend.transaction() as conn:
        repair = backend.client(conn).repair_process("c-1", "fix", "{}")
    wait_for(lambda: backend.row(repair)["status"] == "sucesso", 20, "the repair")
    process = get_process(backend, "c-1")
    assert not process["corrupted"] and process["status"] == "fixed"
    assert process["state"] == {"n": 1, "seen": [None], "fixed": True}
    after = call(backend, "c-1", seq=9)
    wait_for(lambda: backend.row(after)["status"] == "sucesso", 20, "a call after the repair")
    assert running.stop() == 0
    assert "c-1-broke" not in chaves(backend)
    assert get_process(backend, "c-1")["state"]["n"] == 2


@BOTH
def test_bad_input_is_refused_before_anything_is_written(backend):
    start(backend, "v-1")
    with backend.transaction() as conn, pytest.raises(ProcessExistsError):
        backend.client(conn).start_process("v-1", "count", "{}")
    with backend.transaction() as conn:
        client = backend.client(conn)
        with pytest.raises(NotFoundError):
            client.call_process("nobody", "count", "{}")
        for bad in ("", " ", "x" * 192, 7):
            with pytest.raises(ValueError, match="process_id"):
                client.start_process(bad, "count", "{}")
        with pytest.raises(ValueError, match="reserved"):
            client.insert_task("o", "d", "count", None, "{}", lock_key="process:v-1")
        with pytest.raises(ValueError, match="lock_key"):
            client.insert_task("o", "d", "count", None, "{}", lock_key="k", process_id="v-1")
        with pytest.raises(TypeError, match="unknown insert options"):
            client.call_process("v-1", "count", "{}", lock_key="k")
        assert client.get_process("nobody") is None
    assert len(backend.rows()) == 1
    assert len(backend.query(f"SELECT * FROM {backend.table}_processes")) == 1


@WITH_SERVER
def test_a_call_enqueued_while_a_task_of_the_process_runs_does_not_wait_for_it(backend):
    """The running task holds its process's row until its commit; a client's call reads it
    without waiting (only a removal waits)."""
    first = start(backend, "busy", sleep=3)
    running = backend.run(process_worker(backend))
    wait_for(lambda: backend.row(first)["status"] == "processando", 15, "the start to run")
    began = time.monotonic()
    second = call(backend, "busy", seq=1)
    assert time.monotonic() - began < 1.5
    assert backend.row(first)["status"] == "processando"
    wait_for(lambda: backend.row(second)["status"] == "sucesso", 20, "the call to run")
    assert running.stop() == 0


@BOTH
def test_dedupe_key_is_refused_with_a_process(backend):
    start(backend, "d-1")
    with backend.transaction() as conn:
        client = backend.client(conn)
        with pytest.raises(ValueError, match="dedupe_key"):
            client.insert_task("o", "d", "count", None, "{}", process_id="d-1", dedupe_key="k")
        with pytest.raises(TypeError, match="unknown insert options"):
            client.call_process("d-1", "count", "{}", dedupe_key="k")


@BOTH
def test_a_queue_without_the_process_tables_says_so_until_db_gen_upgrade(backend):
    """A queue made before process instances: start_process names ``db_gen --upgrade``
    (nothing written); the upgrade adds the tables, and then a process starts and runs."""
    from nsj_queue_lib.db_gen import render
    from nsj_queue_lib.exceptions import WorkflowUnsupported
    from tests.helpers.mysql_queue import execute_script

    for table in ("process_events", "process_tasks", "processes"):
        backend.execute(f"DROP TABLE {backend.table}_{table}")
    with pytest.raises(WorkflowUnsupported, match="db_gen --upgrade"):
        start(backend, "u-1")
    assert backend.rows() == []
    if backend.family == "postgres":
        backend.admin.execute(render(backend.schema, backend.name, upgrade=True))
    else:
        execute_script(backend.admin, render(backend.schema, backend.name, "mysql", upgrade=True))
    first = start(backend, "u-1")
    running = backend.run(process_worker(backend))
    wait_for(lambda: backend.row(first)["status"] == "sucesso", 20, "the start to run")
    assert running.stop() == 0
    assert get_process(backend, "u-1")["state"]["n"] == 1


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["singlestore-via-server"], indirect=True)
def test_singlestore_refuses_processes_clearly(backend):
    from nsj_queue_lib.exceptions import WorkflowUnsupported

    with pytest.raises(WorkflowUnsupported):
        start(backend, "s-1")
    assert backend.rows() == []


@BOTH
def test_a_durable_step_commits_the_process_state_as_it_is_then(backend):
    """Attempt 1 adds itself to the state, commits a step, then fails: the retry finds the
    state the step committed and adds itself after it."""
    start(backend, "s-1", "stepwise")
    running = backend.run(process_worker(backend, queue_base_interval_retry=RETRY_BASE_MINUTES))
    backend.wait_statuses({"falha": 1, "sucesso": 1}, 20, "the failure and the retry")
    assert running.stop() == 0
    assert get_process(backend, "s-1")["state"] == {"seen": [1, 2]}


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_group_ended_by_a_handler_keeps_its_earlier_successes_process_writes(backend):
    """PostgreSQL's commit groups send process writes with the group's commit. A handler
    that commits bd_conn itself ends the group's transaction with the earlier task's work
    committed: that task's success is written then, and its process's write with it."""
    first = start(backend, "g-a")  # "count": its state's n becomes 1
    start(backend, "g-b", "commits")
    running = backend.run(
        process_worker(backend, queue_concurrency=1, queue_base_interval_retry=RETRY_BASE_MINUTES)
    )
    backend.wait_statuses({"sucesso": 2, "falha": 1}, 20, "both starts, one retried")
    assert running.stop() == 0
    assert backend.row(first)["status"] == "sucesso"
    assert get_process(backend, "g-a")["state"]["n"] == 1


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_an_existing_process_is_refused_on_a_found_rows_connection(backend):
    """Django's MySQL connections set CLIENT_FOUND_ROWS, under which an unchanged row of an
    INSERT ... ON DUPLICATE KEY UPDATE counts as affected: the duplicate must still be seen."""
    import pymysql
    from pymysql.constants import CLIENT

    from tests.helpers.databases import mysql_connect_kwargs

    start(backend, "f-1")
    conn = pymysql.connect(**mysql_connect_kwargs(backend.dsn), client_flag=CLIENT.FOUND_ROWS)
    try:
        with pytest.raises(ProcessExistsError):
            backend.client(conn).start_process("f-1", "count", "{}")
        conn.rollback()
    finally:
        conn.close()
    assert len(backend.rows()) == 1
