"""Settling attempts, the socket-server claim and orphans, on every store.

A task is claimed as its store's runtime claims it (``Backend.claim``): with
the liveness lock in the database where there are session locks, else with
``claim_uncommitted`` and ``commit_and_begin`` (the socket server holds the
lock). The rows a failure writes are the same on every database: they are
spelled out here once, as the contract.
"""

from __future__ import annotations

import datetime
import hashlib

import pytest

from nsj_queue_lib import model
from nsj_queue_lib.db.task_session import ClaimPhases
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.model import PROCESSANDO
from nsj_queue_lib.task_rows import task_row
from tests.integration.store.backends import (
    EVERY_STORE,
    LOCKING,
    POSTGRES,
    SINGLESTORE,
    TASK,
    drain_concurrently,
    on,
)

pytestmark = on(*EVERY_STORE)

# -- failures: the rows of the contract ---------------------------------------------

ENQUEUED = dict(
    id="row0",
    id_inicial=None,
    data_hora_inicial=True,  # times: whether there is one (how they relate is checked apart)
    data_hora=True,
    origem="erp",
    destino="fiscal",
    processo="emitir_nota",
    chave_externa="pedido-1",
    proxima_tentativa=False,
    tentativa=1,
    status="pendente",
    reenfileirado=False,
    estouro_tentativas=False,
    mensagem=None,
    id_anterior=None,
    data_hora_anterior=False,
    status_anterior=None,
    mensagem_anterior=None,
    payload='{"pedido":7}',
    tenant=5,
    grupo_empresarial="g",
    payload_hash=hashlib.sha256(b'{"pedido":7}').hexdigest().encode(),
    pub_sub=False,
    publication_id=None,
    subscriber_id=None,
    dead=False,
    live_id=None,
    prioridade=60,
)
FAILED = dict(ENQUEUED, status="falha", mensagem="boom")
RETRIED = dict(FAILED, reenfileirado=True, proxima_tentativa=True)
OVERFLOWED = dict(FAILED, estouro_tentativas=True)


def next_attempt(row: str, tentativa: int, previous: dict) -> dict:
    """The attempt a retry enqueues after ``previous``: waiting, its payload left in the first."""
    return dict(
        ENQUEUED,
        id=row,
        id_inicial="row0",
        tentativa=tentativa,
        status="agendada",
        id_anterior=previous["id"],
        data_hora_anterior=True,
        status_anterior=previous["status"],
        mensagem_anterior=previous["mensagem"],
        payload=None,
    )


SECOND = next_attempt("row1", 2, RETRIED)
SECOND_LOST = dict(
    SECOND, status="falha_processando", mensagem="lost", reenfileirado=True, proxima_tentativa=True
)
EXPECTED = {
    # scenario: (rows, what the failing call returned)
    "retry": ([RETRIED, SECOND], "row1"),
    "bury": ([OVERFLOWED, dict(ENQUEUED, id="row1", dead=True, live_id="row0")], "row1"),
    "final": ([OVERFLOWED], True),
    "retry-twice": ([RETRIED, SECOND_LOST, next_attempt("row2", 3, SECOND_LOST)], "row2"),
}
ID_COLUMNS = ("id", "id_inicial", "id_anterior", "live_id", "publication_id")
TIME_COLUMNS = ("data_hora_inicial", "data_hora", "proxima_tentativa", "data_hora_anterior")


def comparable(rows: list[dict], labels: dict[int, str]) -> list[dict]:
    """Rows without their database's ids and times: ids become labels, times whether set."""
    out = []
    for row in rows:
        item = {}
        for column in model.QUEUE_COLUMNS:
            value = row[column]
            if column in ID_COLUMNS:
                value = labels.get(value, value)
            elif column in TIME_COLUMNS:
                value = value is not None
            item[column] = value
        out.append(item)
    return out


def fail(backend, conn, scenario: str):
    """Claim the enqueued task and fail it as the executor does; what the last failing call
    returned, and the attempt it settled."""
    store = backend.store
    task = backend.claim(conn)
    store.rollback(conn)  # the handler failed: its work is rolled back
    store.begin(conn)
    if scenario == "retry":
        result = store.fail_and_retry(conn, task.id, "falha", "boom", 90.0)
    elif scenario == "bury":
        result = store.fail_and_bury(conn, task.id, "falha", "boom", task.payload)
    elif scenario == "final":
        result = store.fail_final(conn, task.id, "falha", "boom")
    else:  # retry-twice: the second attempt is lost (the retry service's status)
        second = store.fail_and_retry(conn, task.id, "falha", "boom", 0.0)
        backend.unlock(conn, task.id)
        store.commit(conn)
        assert store.promote_due(conn, 10) == 1
        task = backend.claim(conn)
        assert task.id == second
        assert task.payload == '{"pedido":7}'  # from the first attempt
        store.rollback(conn)
        store.begin(conn)
        result = store.fail_and_retry(conn, task.id, "falha_processando", "lost", 30.0)
    backend.unlock(conn, task.id)
    store.commit(conn)
    return result, task


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_failures_write_the_contracts_rows(backend, worker, scenario):
    backend.enqueue(payload={"pedido": 7}, tenant=5, grupo_empresarial="g", prioridade=60)
    started = backend.now()
    result, task = fail(backend, worker, scenario)
    store = backend.store
    # A second settle of the same attempt changes nothing.
    store.begin(worker)
    assert store.fail_and_retry(worker, task.id, "falha", "again", 1.0) is None
    assert store.fail_and_bury(worker, task.id, "falha", "again", None) is None
    assert store.fail_final(worker, task.id, "falha", "again") is False
    store.commit(worker)

    raw = backend.rows()
    labels = {row["id"]: f"row{n}" for n, row in enumerate(raw)}
    expected_rows, expected_result = EXPECTED[scenario]
    assert comparable(raw, labels) == expected_rows
    assert (result if isinstance(result, bool) else labels[result]) == expected_result
    # The times relate to each other the same way on every database.
    if scenario.startswith("retry"):
        failed, nxt = raw[-2], raw[-1]
        assert nxt["data_hora"] == failed["proxima_tentativa"]
        assert nxt["data_hora_anterior"] == failed["data_hora"]
        assert nxt["data_hora_inicial"] == raw[0]["data_hora_inicial"]
    if scenario == "retry":
        delay = raw[1]["data_hora"] - started
        assert datetime.timedelta(seconds=89) < delay < datetime.timedelta(seconds=91)
    if scenario == "bury":
        assert raw[1]["data_hora"] == raw[1]["data_hora_inicial"]


def test_release_gives_a_claimed_task_back(backend, store, worker):
    task_id = backend.enqueue()
    assert backend.claim(worker).id == task_id
    assert store.release(worker, task_id) is True
    backend.unlock(worker, task_id)
    store.commit(worker)
    assert backend.row(task_id)["status"] == "pendente"
    assert store.release(worker, task_id) is False


# -- the claim of the socket-server path --------------------------------------------


def test_claim_uncommitted_then_commit(backend, store, worker):
    assert store.claim_uncommitted(worker) is None
    assert not backend.in_transaction(worker)
    first, second = backend.enqueue({"prioridade": 90}, {"prioridade": 10})
    task = store.claim_uncommitted(worker)
    assert (task.id, task.row["status"], task.payload) == (first, PROCESSANDO, "texto")
    assert backend.row(first)["status"] == "pendente"  # not committed yet
    store.commit_and_begin(worker)
    assert backend.row(first)["status"] == PROCESSANDO
    assert backend.in_transaction(worker)
    assert backend.liveness_lock_holder(first) is None  # the socket server holds it
    assert store.complete_if_running(worker, first, "ok") is True
    store.commit(worker)
    assert backend.row(first)["status"] == "sucesso"
    assert store.complete_if_running(worker, first, "again") is False
    store.rollback(worker)
    # Rolled back: the task is 'pendente' again for everyone.
    assert store.claim_uncommitted(worker).id == second
    store.rollback(worker)
    assert backend.row(second)["status"] == "pendente"


def test_a_completion_under_an_outside_lock_is_fenced_with_its_writes(backend, store, worker):
    """The socket server's lock was lost and another worker rescued the task while its
    handler ran: its success is refused and the handler's writes are rolled back with it
    (ClaimPhases.complete_fenced, the completion of every dialect's server path)."""
    phases = ClaimPhases(store)
    first = backend.enqueue()
    task = phases.claim(worker)
    assert task is not None and task.id == first
    phases.keep(worker)
    # The handler writes in the task's transaction (a task it enqueues, say).
    written = store.insert_task(worker, task_row(dict(TASK, payload="a write"), False))
    backend.set_status("falha_processando", first)  # the rescue, from another session
    assert phases.complete_fenced(worker, first, "ok") is False
    assert not backend.in_transaction(worker)
    assert backend.row(written) is None  # rolled back
    assert backend.row(first)["status"] == "falha_processando"
    # Unfenced, the same completion commits both.
    second = backend.enqueue()
    assert phases.claim(worker).id == second
    phases.keep(worker)
    written = store.insert_task(worker, task_row(dict(TASK, payload="a write"), False))
    assert phases.complete_fenced(worker, second, "ok") is True
    assert backend.row(second)["status"] == "sucesso"
    assert backend.row(written) is not None


def test_concurrent_uncommitted_claims_never_share_a_task(backend, store):
    backend.enqueue(*[dict(chave_externa=str(n)) for n in range(120)])

    def drain(conn) -> list[int]:
        claimed = []
        while (task := store.claim_uncommitted(conn)) is not None:
            store.commit_and_begin(conn)  # the socket server's lock is taken before this
            # False when InnoDB chose this completion as a deadlock's victim: the store gave
            # the task back, and a later claim takes it again (every task must still end
            # 'sucesso', completed by exactly one claim: drain_concurrently checks).
            if store.complete_if_running(conn, task.id, "ok"):
                claimed.append(task.id)
            store.commit(conn)
        return claimed

    drain_concurrently(backend, 6, drain)


# -- orphans ------------------------------------------------------------------------


def test_find_orphans_without_session_locks_lists_the_running_rows(backend, store, worker):
    """The socket server says which are held: every 'processando' row is a candidate."""
    running, claimed, _waiting = backend.enqueue(
        {"chave_externa": "a"}, {"chave_externa": "b"}, {"chave_externa": "c"}
    )
    backend.set_status(PROCESSANDO, running)
    assert backend.claim(worker).id == claimed
    rescuer = backend.worker(executor=False)
    store.begin(rescuer)
    found = store.find_orphans(rescuer, 10, check_session_locks=False)
    assert [t.id for t in found] == [running, claimed]
    assert (found[0].payload, found[0].row["chave_externa"], found[0].tentativa) == (
        "texto",
        "a",
        1,
    )
    assert store.find_orphans(rescuer, 1, check_session_locks=False)[0].id == running
    store.rollback(rescuer)


@on(*LOCKING)
def test_find_orphans_sees_a_running_row_without_lock_only(backend, store, worker):
    live, orphan = backend.enqueue(
        {"prioridade": 90}, {"chave_externa": "orphan", "prioridade": 10}
    )
    store.claim(worker)  # 'live' is running, its lock held
    backend.set_status(PROCESSANDO, orphan)
    rescuer = backend.worker(executor=False)
    store.begin(rescuer)
    found = store.find_orphans(rescuer, 10, check_session_locks=True)
    assert [t.id for t in found] == [orphan]
    assert found[0].payload == "texto" and found[0].row["chave_externa"] == "orphan"
    # The rescuer holds the row: another rescuer skips it instead of waiting.
    other = backend.worker(executor=False)
    store.begin(other)
    assert store.find_orphans(other, 10, check_session_locks=True) == []
    # Without the session locks (the socket server's) the live row is a candidate too;
    # the row being rescued is still skipped.
    assert [t.id for t in store.find_orphans(other, 10, check_session_locks=False)] == [live]
    store.rollback(other)
    assert store.fail_and_retry(rescuer, orphan, model.FALHA_PROCESSANDO, "lost", 60) is not None
    store.commit(rescuer)
    assert backend.row(orphan)["status"] == "falha_processando"


@on(*LOCKING)
def test_rolling_back_a_failed_attempt_keeps_its_task_alive(backend, store, worker):
    """The executor rolls the handler's work back and writes the failure in the transaction
    that follows: the lock stays held inside a transaction, never read as left behind."""
    task_id = backend.enqueue()
    assert store.claim(worker).task.id == task_id
    store.rollback_and_begin(worker)
    assert backend.in_transaction(worker)
    rescuer = backend.worker(executor=False)
    store.begin(rescuer)
    assert store.find_orphans(rescuer, 10, check_session_locks=True) == []
    store.rollback(rescuer)
    assert store.fail_and_retry(worker, task_id, model.FALHA, "failed", 60) is not None
    store.commit(worker)
    assert backend.row(task_id)["status"] == model.FALHA


@on(*LOCKING)
def test_a_killed_worker_leaves_an_orphan(backend, store, worker):
    task_id = backend.enqueue()
    victim = backend.worker()
    store.claim(victim)
    store.begin(worker)
    assert store.find_orphans(worker, 10, check_session_locks=True) == []
    store.rollback(worker)
    backend.terminate(victim)
    assert backend.liveness_lock_holder(task_id) is None
    store.begin(worker)
    assert [t.id for t in store.find_orphans(worker, 10, check_session_locks=True)] == [task_id]
    store.rollback(worker)


@on(*LOCKING)
def test_ending_a_session_that_ended_already_is_no_error(backend, store):
    """A timeout's give-up races the handler's own return, which closes its connection:
    the session the give-up ends may be gone, and the attempt must still be settled."""
    closed_by_its_owner = backend.worker()
    store.claim(closed_by_its_owner)
    closed_by_its_owner.close()
    backend.driver.terminate_session(backend.admin, closed_by_its_owner)
    ended_twice = backend.worker()
    backend.terminate(ended_twice)
    backend.driver.terminate_session(backend.admin, ended_twice)


@on(SINGLESTORE)
def test_singlestore_has_no_database_locks_and_says_so(backend, store, worker):
    """Its locks are the socket server's: the store has no lock operations at all."""
    for operation in ("claim", "complete_and_claim", "unlock_task", "try_service_lock"):
        assert not hasattr(store, operation), operation
    assert not hasattr(store, "service_unlock")
    with pytest.raises(ConfigError, match="CLIENT_SERVER_MODE"):
        store.find_orphans(worker, 10, check_session_locks=True)
    assert "CLIENT_SERVER_MODE" in backend.driver.check_settings()


@on(POSTGRES)
def test_a_success_between_its_unlock_and_its_commit_is_not_rescued(backend, store, worker):
    """The claim function releases the finished task's liveness lock before the COMMIT
    (advisory unlocks are not transactional: nsj-queue-lib 1.2.2's order). In between, the
    row lock its UPDATE took keeps the retry service off the row, which its COMMIT makes
    'sucesso': the task is never rescued to run again."""
    task_id = backend.enqueue()
    assert store.claim(worker).task.id == task_id
    store.claim_call(worker, task_id, "ok", 0, None)  # 'sucesso', unlocked; not committed
    rescuer = backend.worker(executor=False)
    store.begin(rescuer)
    # No liveness lock is held for the 'processando' row the others see, yet it is skipped.
    assert store.find_orphans(rescuer, 10, check_session_locks=True) == []
    store.rollback(rescuer)
    store.commit(worker)
    assert backend.row(task_id)["status"] == model.SUCESSO
    # The control: the same moment with the row lock gone (the COMMIT failed) is an orphan.
    second = backend.enqueue(chave_externa="second")
    assert store.claim(worker).task.id == second
    store.claim_call(worker, second, "ok", 0, None)
    store.rollback(worker)
    store.begin(rescuer)
    assert [t.id for t in store.find_orphans(rescuer, 10, check_session_locks=True)] == [second]
    store.rollback(rescuer)
