"""A task's life cycle (CONTRACT.md section 7, docs/lifecycle.md), on every backend.

Cancel (waiting, retry-waiting, running: cooperative or not, racing with the
end of the handler, surviving a kill -9), progress seen from another session
while the task runs, the task view, the manual retry, and timeouts (a hung
handler given up and retried while the other executors keep draining; a
worker whose given-up handlers pile up exits non-zero).
"""

from __future__ import annotations

import datetime
import json
import random
import threading
import time

import pytest

from nsj_queue_lib import TaskCancelled, current_task
from nsj_queue_lib.db.driver import client_inspection_store
from nsj_queue_lib.db.mysql.errors import is_retryable
from nsj_queue_lib.exceptions import DatabaseError, NoCurrentTaskError, NotFoundError
from nsj_queue_lib.runtime.worker_runtime import EXIT_THREAD_DIED
from tests.contract.test_contract import RETRY_BASE_MINUTES, write_exec
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)

UNKNOWN_ID = 987_654_321
# Worker processes only: what signals and stuck threads need (the socket-server backends
# run the same code paths in-process in the tests above).
PROCESS_BACKENDS = pytest.mark.parametrize(
    "backend", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True
)


def view(backend, task_id):
    with backend.transaction() as conn:
        return backend.client(conn).get_task(task_id)


def cancel(backend, task_id) -> str:
    # InnoDB may choose the caller's transaction as the victim of a deadlock with a worker
    # settling the same task; the caller retries its transaction (docs/lifecycle.md).
    for attempt in range(3):
        try:
            with backend.transaction() as conn:
                return backend.client(conn).cancel_task(task_id)
        except DatabaseError as exc:
            if attempt == 2 or not is_retryable(exc.__cause__):
                raise
    raise AssertionError("unreachable")


TIMEOUT_SETTINGS = dict(
    queue_concurrency=2,
    queue_task_timeout=1.0,
    queue_task_timeout_grace=0.5,
    queue_base_interval_retry=RETRY_BASE_MINUTES,
)


def time_out_two(backend) -> None:
    """Enqueue two tasks whose first attempt times out ("hangs", "cooperates") and five quick
    ones; check that both first attempts failed with 'timeout', their writes rolled back, and
    were retried, while the quick tasks succeeded."""
    hangs, cooperates = backend.enqueue([dict(payload="hangs"), dict(payload="cooperates")])
    quick = backend.enqueue([dict(payload="quick")] * 5)
    wait_for(lambda: backend.statuses() == {"falha": 2, "sucesso": 7}, 15, "timeouts and retries")
    for task_id in (hangs, cooperates):
        first = backend.row(task_id)
        assert first["mensagem"].startswith("timeout"), first["mensagem"]
        assert view(backend, task_id)["mensagem"] == "attempt 2"
    assert all(backend.row(t)["status"] == "sucesso" for t in quick)
    committed = [r["task_id"] for r in backend.exec_rows()]
    assert hangs not in committed and cooperates not in committed  # rolled back


def test_waiting_tasks_are_cancelled_and_never_run(backend):
    later = backend.now() + datetime.timedelta(hours=1)
    pending, scheduled = backend.enqueue(
        [dict(chave_externa="pending"), dict(chave_externa="scheduled", data_hora=later)]
    )
    assert view(backend, pending) == {
        "id_inicial": pending,
        "id": pending,
        "status": "pendente",
        "tentativa": 1,
        "mensagem": None,
        "cancel_requested": False,
        "progress": None,
    }
    with backend.transaction() as conn:
        client = backend.client(conn)
        assert client.cancel_task(pending) == "cancelada"
        assert client.cancel_task(scheduled) == "cancelada"
        assert client.cancel_task(pending) == "cancelada"  # finished: left as it is
        assert client.get_task(UNKNOWN_ID) is None
        with pytest.raises(NotFoundError):
            client.cancel_task(UNKNOWN_ID)
        with pytest.raises(NotFoundError):
            client.retry_task(UNKNOWN_ID)
        with pytest.raises(ValueError, match="ran out of attempts"):
            client.retry_task(pending)
    for task_id in (pending, scheduled):
        row = backend.row(task_id)
        assert (row["status"], row["cancel_requested"]) == ("cancelada", True)
    # A worker drains the queue (the marker runs) and never runs a cancelled task.
    worker = backend.run(backend.function_worker(lambda p, t, c: write_exec(backend, c, t)))
    [marker] = backend.enqueue([dict(chave_externa="marker")])
    backend.wait_statuses({"cancelada": 2, "sucesso": 1}, 10, "the marker to run")
    assert [r["task_id"] for r in backend.exec_rows()] == [marker]
    summary = client_inspection_store(backend.admin, backend.table).summary(backend.admin)
    assert {(r["status"], r["tasks"]) for r in summary} == {("cancelada", 2), ("sucesso", 1)}
    assert worker.stop() == 0


def test_a_running_task_sees_its_cancel_and_its_progress_is_seen_meanwhile(backend):
    """Cooperative cancel of a running task within 2 s; progress visible from another session
    while it runs (and kept after); a retry waiting for its time is cancelled too."""
    cancel_seen, ran = [], []

    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)  # must roll back
        if payload == "fails":
            raise RuntimeError("first attempt fails")
        ran.append(time.monotonic())
        task = current_task()
        assert task.id == tarefa["id"]
        for step in range(1, 1200):
            task.report_progress(step, 1200, f"step {step}")
            if task.cancel_requested:
                cancel_seen.append(time.monotonic())
            task.check_cancelled()
            time.sleep(0.02)
        return "never"

    worker = backend.run(backend.function_worker(execute, queue_base_interval_retry=10.0))
    fails, runs = backend.enqueue([dict(payload="fails"), dict(payload="runs")])
    wait_for(
        lambda: (view(backend, runs)["progress"] or {}).get("done", 0) >= 2,
        10,
        "the progress to show while the task runs",
    )
    seen = view(backend, runs)
    assert seen["status"] == "processando" and seen["progress"]["total"] == 1200
    assert seen["progress"]["message"] == f"step {seen['progress']['done']}"
    backend.wait_statuses({"falha": 1, "agendada": 1, "processando": 1}, 10, "the retry")
    assert cancel(backend, fails) == "cancelada"  # its retry, waiting for its time
    asked = time.monotonic()
    assert cancel(backend, runs) == "processando"
    wait_for(lambda: backend.row(runs)["status"] == "cancelada", 5, "the cancel to stop it")
    assert cancel_seen and cancel_seen[0] - asked < 2.0
    # Reported 50 times a second; written a few times a second at most, never more.
    writes = worker.runtime.lifecycle.progress.writes
    assert 1 <= writes <= 4 * (cancel_seen[0] - ran[0]) + 2, writes
    assert backend.statuses() == {"falha": 1, "cancelada": 2}  # no retry, no dead letter
    assert backend.exec_rows() == []  # the cancelled handler's writes rolled back
    final = view(backend, runs)
    assert final["status"] == "cancelada" and final["cancel_requested"] is True
    assert final["progress"]["done"] >= seen["progress"]["done"]  # kept after the rollback
    retry = view(backend, fails)
    assert (retry["status"], retry["tentativa"], retry["id_inicial"]) == ("cancelada", 2, fails)
    with pytest.raises(NoCurrentTaskError):
        current_task()
    assert worker.stop() == 0


def test_cancel_racing_with_completion_ends_one_way_or_the_other(backend):
    """Each task ends either 'sucesso' with its write committed, or 'cancelada' without it; a
    handler that never looks at the request finishes normally."""

    started = set()

    def execute(payload, tarefa, bd_conn):
        started.add(tarefa["id"])
        write_exec(backend, bd_conn, tarefa)
        time.sleep(float(payload))
        if tarefa["chave_externa"] == "cooperative":
            current_task().check_cancelled()
        return "done"

    worker = backend.run(backend.function_worker(execute, queue_concurrency=4))
    rng = random.Random(7)
    tasks = [dict(payload=f"{rng.uniform(0.05, 0.3):.3f}", chave_externa="cooperative")] * 6
    ids = backend.enqueue(tasks + [dict(payload="0.6", chave_externa="ignores")])
    answers = {}
    for task_id in ids:
        time.sleep(rng.uniform(0.0, 0.08))
        if task_id == ids[-1]:
            # Not yet started, it could be waiting in the queue (a commit group gives back
            # what it cannot start soon), where a cancel ends it before it runs.
            wait_for(lambda: ids[-1] in started, 10, "the task that ignores requests to start")
        answers[task_id] = cancel(backend, task_id)
    wait_for(lambda: set(backend.statuses()) <= {"sucesso", "cancelada"}, 10, "all to settle")
    committed = {r["task_id"] for r in backend.exec_rows()}
    for row in backend.rows():
        assert (row["id"] in committed) == (row["status"] == "sucesso"), row
        # A task that had finished was left as it was; any other got the request.
        assert row["cancel_requested"] is (answers[row["id"]] != "sucesso"), row
    assert backend.row(ids[-1])["status"] == "sucesso"  # it never looked at the request
    assert worker.stop() == 0


def test_retry_task_gives_an_exhausted_task_a_new_attempt(backend):
    dead_runs = []

    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)
        if tarefa["tentativa"] == 1:
            raise RuntimeError("first attempt fails")
        return "second attempt"

    def execute_dead(payload, tarefa, bd_conn):
        dead_runs.append(tarefa["id"])
        return "dead letter handled"

    worker = backend.run(backend.function_worker(execute, execute_dead, queue_max_retry=1))
    [task_id] = backend.enqueue([dict(chave_externa="exhausted")])
    backend.wait_statuses({"falha": 1, "sucesso": 1}, 10, "the failure and its dead letter")
    with backend.transaction() as conn:
        new_id = backend.client(conn).retry_task(task_id)
    assert new_id > task_id
    wait_for(lambda: backend.row(new_id)["status"] == "sucesso", 10, "the new attempt to run")
    task = view(backend, task_id)
    assert (task["id"], task["tentativa"], task["mensagem"]) == (new_id, 2, "second attempt")
    with backend.transaction() as conn, pytest.raises(ValueError, match="ran out of attempts"):
        backend.client(conn).retry_task(task_id)  # it succeeded now: nothing to retry
    assert len(dead_runs) == 1
    assert worker.stop() == 0


def test_a_hung_handler_is_timed_out_and_retried_while_the_others_drain(backend):
    release = threading.Event()
    timeouts = []

    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)
        if tarefa["tentativa"] == 1 and payload == "hangs":
            release.wait(60)  # stuck in Python code: never looks at the request
        elif tarefa["tentativa"] == 1 and payload == "cooperates":
            try:
                while True:
                    current_task().check_cancelled()
                    time.sleep(0.02)
            except TaskCancelled:
                timeouts.append(current_task().stop_reason)
                raise
        return f"attempt {tarefa['tentativa']}"

    worker = backend.run(
        backend.function_worker(
            execute,
            **TIMEOUT_SETTINGS,
        )
    )
    time_out_two(backend)
    assert timeouts == ["timeout"]
    release.set()  # the given-up handler returns late: nothing changes
    time.sleep(0.3)
    assert backend.statuses() == {"falha": 2, "sucesso": 7}
    assert worker.alive() and worker.stop() == 0


@PROCESS_BACKENDS
def test_stuck_handlers_piling_up_beyond_the_concurrency_stop_the_worker(backend):
    proc = backend.start_process(
        "stuck",
        QUEUE_TASK_TIMEOUT="0.5",
        QUEUE_TASK_TIMEOUT_GRACE="0.3",
        QUEUE_CONCURRENCY="1",
        QUEUE_BASE_INTERVAL_RETRY="10",
    )
    first, second = backend.enqueue([dict(payload=json.dumps({"sleep": 60}))] * 2)
    assert proc.wait(20) == EXIT_THREAD_DIED
    assert "given up after their timeout" in proc.output()
    for task_id in (first, second):
        row = backend.row(task_id)
        assert row["status"] == "falha" and row["mensagem"].startswith("timeout")
    assert backend.statuses() == {"falha": 2, "agendada": 2}


@PROCESS_BACKENDS
def test_a_cancel_request_survives_a_kill_9_and_the_rescue(backend):
    victim = backend.start_process("victim")
    [task_id] = backend.enqueue([dict(payload=json.dumps({"sleep": 60, "started": True}))])
    wait_for(lambda: backend.started_ids() == [task_id], 15, "the victim to start the task")
    assert cancel(backend, task_id) == "processando"  # the handler ignores it
    victim.kill9()
    rescuer = backend.run(backend.contract_worker(queue_retry_thread_interval=0.3))
    wait_for(lambda: backend.statuses() == {"cancelada": 1}, 15, "the rescue to cancel it")
    assert backend.exec_rows() == [] and backend.row(task_id)["cancel_requested"] is True
    assert rescuer.stop() == 0
