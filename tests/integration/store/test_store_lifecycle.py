"""A task's life cycle at the store level, on every store (and every client connection).

Cancel by status (``cancel_attempt``), the view of a task (``task_view`` through
``QueueClient.get_task``), progress written only while an attempt runs, a
handler's cancel (``cancel_running``), the failure path's check of a cancel
request (``cancel_if_requested``, also what the retry service's rescue runs),
and the workers' poll (``cancel_requests``).
"""

from __future__ import annotations

import pytest

from nsj_queue_lib.exceptions import ClaimRoutineError
from nsj_queue_lib.model import PROCESSANDO
from nsj_queue_lib.retry_policy import RetryPolicies
from nsj_queue_lib.runtime.failures import settle_failure
from tests.integration.store.backends import CLIENT_PATHS, EVERY_STORE, on


@on(*CLIENT_PATHS)
def test_cancel_task_by_status_through_every_client_connection(backend):
    pending, running, done = backend.enqueue({}, {}, {})
    backend.set_status(PROCESSANDO, running)
    backend.set_status("sucesso", done)
    conn = backend.client_conn()
    client = backend.client(conn)
    assert client.cancel_task(pending) == "cancelada"
    assert client.cancel_task(running) == "processando"
    assert client.cancel_task(done) == "sucesso"
    assert client.get_task(running)["cancel_requested"] is True
    conn.rollback()  # nothing of it is kept: the caller's transaction decides
    assert backend.statuses() == {pending: "pendente", running: PROCESSANDO, done: "sucesso"}
    assert client.cancel_task(pending) == "cancelada"
    conn.commit()
    row = backend.row(pending)
    assert (row["status"], bool(row["cancel_requested"])) == ("cancelada", True)
    assert row["mensagem"].startswith("cancelled before it ran")
    assert bool(backend.row(done)["cancel_requested"]) is False


@on(*EVERY_STORE)
def test_progress_cancel_requests_and_the_settling_of_a_cancelled_attempt(backend, worker):
    store = backend.store
    first_id, second_id = backend.enqueue({}, {})
    admin = backend.worker()
    assert store.report_progress(admin, first_id, 1, 10, "waiting") is False  # not running
    first = backend.claim(worker)
    assert store.report_progress(admin, first.id, 3, 10, "three") is True
    assert store.cancel_requests(admin, [first.id, second_id]) == []
    client_conn = backend.client_conn()
    assert backend.client(client_conn).cancel_task(first.id) == PROCESSANDO
    client_conn.commit()
    assert store.cancel_requests(admin, [first.id, second_id]) == [first.id]
    # The handler failed after the request: the attempt ends 'cancelada', not retried.
    store.rollback(worker)
    store.begin(worker)
    policies = RetryPolicies.build(backend.driver.settings)
    assert settle_failure(store, worker, policies, first, RuntimeError("boom")) is None
    backend.unlock(worker, first.id)
    store.commit(worker)
    task = backend.client(client_conn).get_task(first.id)
    assert task == {
        "id_inicial": first.id,
        "id": first.id,
        "status": "cancelada",
        "tentativa": 1,
        "mensagem": "cancelled while running (QueueClient.cancel_task)",
        "cancel_requested": True,
        "progress": {"done": 3, "total": 10, "message": "three"},
    }
    # Without a request a failure is retried as before; a handler's own cancel ends it.
    second = backend.claim(worker)
    assert store.cancel_if_requested(worker, second.id, "x") is False
    assert store.cancel_running(worker, second.id, "stopped") is True
    backend.unlock(worker, second.id)
    store.commit(worker)
    assert backend.statuses() == {first.id: "cancelada", second.id: "cancelada"}


@on(*EVERY_STORE)
def test_a_cancel_waits_for_a_failure_being_recorded_and_cancels_the_next_attempt(backend, worker):
    store = backend.store
    task_id = backend.enqueue()
    task = backend.claim(worker)
    store.rollback(worker)
    store.begin(worker)
    retry_id = settle_failure(
        store, worker, RetryPolicies.build(backend.driver.settings), task, RuntimeError("x")
    )
    assert retry_id is not None
    backend.unlock(worker, task.id)
    store.commit(worker)
    conn = backend.client_conn()
    client = backend.client(conn)
    assert client.get_task(task_id)["id"] == retry_id
    assert client.cancel_task(task_id) == "cancelada"
    conn.commit()
    assert backend.statuses() == {task_id: "falha", retry_id: "cancelada"}


@on(*EVERY_STORE)
def test_retry_task_refuses_what_did_not_run_out_of_attempts(backend):
    task_id = backend.enqueue()
    conn = backend.client_conn()
    with pytest.raises(ValueError, match="is pendente"):
        backend.client(conn).retry_task(task_id)
    with pytest.raises(TypeError):
        backend.client(conn).get_task("1")  # type: ignore[arg-type]
    assert backend.count() == 1


@on(*EVERY_STORE)
def test_bind_refuses_a_table_without_the_life_cycle_columns(backend, worker):
    backend.execute(f"ALTER TABLE {backend.table} DROP COLUMN progress_message")
    with pytest.raises(ClaimRoutineError, match="lacks columns") as info:
        backend.new_store().bind(worker)
    assert "--upgrade" in str(info.value)
