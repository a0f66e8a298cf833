"""The queue's identity (bind) and the executors' claim path of the stores with session locks.

Worker connections are autocommit and set up by the driver, as the runtime's
executors are; the store opens and ends their transactions. ``claim`` and
``complete_and_claim`` are the one claim path of each dialect: the claim
function on PostgreSQL, the claim procedure on MySQL.
"""

from __future__ import annotations

import time

import pytest

from nsj_queue_lib.db.mysql.names import qualified_table, stable_queue_number
from nsj_queue_lib.exceptions import (
    AttemptFenced,
    ClaimRoutineError,
    DatabaseError,
    QueueTableMissingError,
)
from nsj_queue_lib.model import PROCESSANDO, Claim, TaskRecord
from tests.integration.store.backends import (
    EVERY_STORE,
    ago,
    drain_concurrently,
    execute,
    normalize,
    on,
)

# -- bind -------------------------------------------------------------------------


@on(*EVERY_STORE)
def test_bind_gives_the_queue_a_stable_number(backend, worker):
    store = backend.new_store()
    with pytest.raises(RuntimeError, match="bind"):
        store.queue_number  # noqa: B018 - the property raises
    number = store.bind(worker)
    assert number == store.queue_number == backend.store.queue_number  # bound on another session
    assert 0 < number < 2**32
    if backend.dialect == "postgres":
        assert number == backend.value("SELECT %s::regclass::oid::bigint", (backend.table,))
    else:
        assert number == stable_queue_number(qualified_table(backend.table))
    # An unqualified name is the same queue (PostgreSQL's search path, MySQL's database).
    assert backend.new_store(backend.queue.name).bind(worker) == number


@on(*EVERY_STORE)
def test_bind_refuses_a_missing_table(backend, worker):
    with pytest.raises(QueueTableMissingError, match="does not exist"):
        backend.new_store(f"{backend.table}_missing").bind(worker)


def test_bind_refuses_a_missing_claim_routine(backend, worker):
    backend.drop_claim_routine()
    with pytest.raises(ClaimRoutineError, match="is missing") as info:
        backend.new_store().bind(worker)
    assert "--upgrade" in str(info.value) and backend.claim_routine in str(info.value)


def test_bind_refuses_a_claim_routine_of_another_version(backend, worker):
    backend.comment_claim_routine("x")
    with pytest.raises(ClaimRoutineError, match="another version") as info:
        backend.new_store().bind(worker)
    assert "--upgrade" in str(info.value)


# -- claim ----------------------------------------------------------------------


def test_claim_on_an_empty_queue_returns_none_with_the_connection_idle(backend, store, worker):
    assert store.claim(worker) is None
    assert not backend.in_transaction(worker)
    backend.enqueue(data_hora=ago(-3600))  # not due yet
    assert store.claim(worker) is None
    assert not backend.in_transaction(worker)


def drain(store, conn) -> list[Claim]:
    """Claims in the order one executor makes them, each after completing the one before."""
    claims = []
    claimed = store.claim(conn)
    while claimed is not None:
        claims.append(claimed)
        claimed = store.complete_and_claim(conn, claimed.task.id, "ok", claim_next=True)
    return claims


def test_claim_order_is_priority_then_data_hora_then_id(backend, store, worker):
    low = backend.enqueue(prioridade=10, data_hora=ago(3))
    high_newer = backend.enqueue(prioridade=90, data_hora=ago(1))
    high_older = backend.enqueue(prioridade=90, data_hora=ago(2))
    same_time = ago(5)
    tie_first, tie_second = backend.enqueue({"data_hora": same_time}, {"data_hora": same_time})
    backend.enqueue(prioridade=100, data_hora=ago(-3600))  # in the future: never claimed now
    scheduled = backend.enqueue(prioridade=100, data_hora=ago(10))
    backend.set_status("agendada", scheduled)

    claims = drain(store, worker)
    assert [c.task.id for c in claims] == [high_older, high_newer, tie_first, tie_second, low]
    for claim in claims:
        assert claim.liveness_locked is True
        assert isinstance(claim.task, TaskRecord) and claim.task.row["id"] == claim.task.id
        assert claim.task.row["status"] == PROCESSANDO and claim.task.tentativa == 1
        assert claim.task.row["pub_sub"] is False and claim.task.dead is False
    assert not backend.in_transaction(worker)  # nothing left to claim: idle
    assert sorted(backend.statuses().values()) == ["agendada", "pendente"] + ["sucesso"] * 5


def test_a_claim_is_committed_before_the_task_runs(backend, store, worker):
    task_id = backend.enqueue()
    claimed = store.claim(worker)
    assert claimed.task.id == task_id
    assert backend.in_transaction(worker)  # open for the task's handler
    assert backend.row(task_id)["status"] == PROCESSANDO  # already visible to everyone
    store.rollback(worker)  # the handler's work is undone, never the claim
    assert backend.row(task_id)["status"] == PROCESSANDO


def test_a_future_task_is_not_claimed_until_its_time(backend, store, worker):
    task_id = backend.enqueue(data_hora=ago(-0.6))
    assert store.claim(worker) is None
    seconds = store.seconds_until_next_due(worker)
    assert 0 < seconds <= 0.6
    time.sleep(seconds + 0.05)
    assert store.claim(worker).task.id == task_id


@pytest.mark.parametrize(
    "hold",
    [
        "SELECT id FROM {table} WHERE id = %s FOR UPDATE",
        "UPDATE {table} SET mensagem = 'held' WHERE id = %s",
    ],
    ids=["select-for-update", "update"],
)
def test_claim_skips_a_row_another_transaction_holds(backend, store, worker, hold):
    """A row locked by id elsewhere (a handler's own statement, say) is passed at once."""
    first, second = backend.enqueue({"prioridade": 90}, {"prioridade": 10})
    other = backend.client_conn()
    execute(other, hold.format(table=backend.table), (first,))
    started = time.monotonic()
    assert store.claim(worker).task.id == second
    assert time.monotonic() - started < 2  # no waiting
    other.rollback()
    assert backend.row(first)["status"] == "pendente"


def test_claim_takes_the_liveness_lock_on_the_running_connection(backend, store, worker):
    task_id = backend.enqueue()
    store.claim(worker)
    # Visible from any other session, held by the session that runs the task.
    assert backend.liveness_lock_holder(task_id) == backend.session_id(worker)
    assert store.complete_and_claim(worker, task_id, "feito", claim_next=False) is None
    assert backend.liveness_lock_holder(task_id) is None
    assert not backend.in_transaction(worker)
    row = backend.row(task_id)
    assert (row["status"], row["mensagem"]) == ("sucesso", "feito")


def test_a_task_whose_lock_another_session_holds_is_claimed_without_it(backend, store, worker):
    """A worker of another version running the task holds its lock: the claim says so."""
    task_id = backend.enqueue()
    elsewhere = backend.worker()
    backend.lock_elsewhere(elsewhere, task_id)
    claimed = store.claim(worker)
    assert (claimed.task.id, claimed.liveness_locked) == (task_id, False)
    assert backend.liveness_lock_holder(task_id) == backend.session_id(elsewhere)


def test_complete_and_claim_commits_the_handlers_work_and_claims_the_next(backend, store, worker):
    first, second = backend.enqueue({"prioridade": 90}, {"prioridade": 10})
    assert store.claim(worker).task.id == first
    # The handler writes in the task's transaction.
    execute(worker, f"UPDATE {backend.table} SET tenant = 99 WHERE id = %s", (first,))
    claimed = store.complete_and_claim(worker, first, "ok", claim_next=True)
    assert claimed.task.id == second and claimed.liveness_locked is True
    assert backend.in_transaction(worker)
    row = backend.row(first)
    assert (row["status"], row["mensagem"], row["tenant"]) == ("sucesso", "ok", 99)
    assert backend.liveness_lock_holder(first) is None
    assert backend.liveness_lock_holder(second) == backend.session_id(worker)
    assert backend.row(second)["status"] == PROCESSANDO


@pytest.mark.parametrize("claim_next", [False, True])
def test_complete_of_a_task_no_longer_running_is_fenced_and_commits_nothing(
    backend, store, worker, claim_next
):
    task_id = backend.enqueue()
    other = backend.enqueue()
    store.claim(worker)
    backend.set_status("falha_processando", task_id)  # settled by the retry service meanwhile
    with pytest.raises(AttemptFenced):
        store.complete_and_claim(worker, task_id, "ok", claim_next=claim_next)
    assert backend.row(task_id)["status"] == "falha_processando"
    assert backend.row(other)["status"] == "pendente"  # the claim after it did not happen
    # The transaction was rolled back and the connection goes on.
    assert store.claim(worker).task.id == other


HOSTILE_PAYLOADS = [
    "quote ' double \" backslash \\ end",
    "lines\nand\ttabs\r and \x01 control",
    "unicode: ação 日本 😀",
    '{"json": ["inside", 1, null]}',
    "",
]


def enqueue_hostile_payloads(backend, null_boolean: bool = False):
    """A task per HOSTILE_PAYLOADS (ids, and their data_hora), and a later attempt of the first
    (its first settled), which keeps no payload of its own: the claim resolves it from the
    first attempt. ``null_boolean``: that attempt's estouro_tentativas is NULL."""
    at = ago(60).replace(microsecond=678901)
    ids = backend.enqueue(
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
    extra_column, extra_value = (", estouro_tentativas", ", NULL") if null_boolean else ("", "")
    backend.execute(
        f"INSERT INTO {backend.table} (id_inicial, processo, payload, payload_hash, "
        f"tentativa, data_hora, prioridade, proxima_tentativa, reenfileirado{extra_column}) "
        f"SELECT id, processo, NULL, payload_hash, 2, data_hora, 1, data_hora, TRUE{extra_value} "
        f"FROM {backend.table} WHERE id = %s",
        (ids[0],),
    )
    backend.set_status("sucesso", ids[0])
    # A trace context (observability/trace_context.py) travels with the claimed row.
    backend.execute(
        f"UPDATE {backend.table} SET trace_context = %s WHERE id = %s", (TRACE_CONTEXT, ids[1])
    )
    return ids, at


TRACE_CONTEXT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01;congo=t61rcWkgMzE"


def test_a_claimed_task_is_the_row_a_plain_select_reads(backend, store, worker):
    """Same keys, order, values and types as get_task; a later attempt's payload is its first's."""
    ids, at = enqueue_hostile_payloads(backend)
    reader = backend.worker(executor=False)  # autocommit, UTC like the worker's session
    claimed, seen = store.claim(worker), 0
    while claimed is not None:
        task = claimed.task
        expected = backend.claimed_row(store, reader, task.id)
        assert task.row == expected and list(task.row) == list(expected)
        assert (task.payload, task.tentativa, task.dead) == (
            expected["payload"],
            expected["tentativa"],
            False,
        )
        assert isinstance(task.row["pub_sub"], bool)
        if task.tentativa == 2:
            assert task.payload == HOSTILE_PAYLOADS[0] and task.row["reenfileirado"] is True
        else:
            assert normalize(dict(task.row))["data_hora"] == at
            # No hash of an empty payload.
            assert isinstance(task.row["payload_hash"], bytes) or task.payload == ""
        seen += 1
        claimed = store.complete_and_claim(worker, task.id, "ok", claim_next=True)
    assert seen == len(HOSTILE_PAYLOADS)
    assert backend.count("status = 'sucesso'") == len(HOSTILE_PAYLOADS) + 1


def test_a_failing_claim_claims_nothing_and_leaves_the_connection_usable(backend, store, worker):
    task_id = backend.enqueue()
    with backend.failing_updates_to(PROCESSANDO, "the claim exploded (test)"):
        with pytest.raises(DatabaseError, match="exploded"):
            store.claim(worker)
    assert not backend.in_transaction(worker)
    assert backend.row(task_id)["status"] == "pendente"
    assert backend.liveness_lock_holder(task_id) is None
    assert store.claim(worker).task.id == task_id


def test_concurrent_claims_never_share_a_task(backend, store):
    backend.enqueue(*[dict(chave_externa=str(n), prioridade=n % 5) for n in range(200)])
    drain_concurrently(backend, 6, lambda conn: [c.task.id for c in drain(store, conn)])
