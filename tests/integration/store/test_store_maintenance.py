"""What the dispatcher and the periodic services ask of every store: due rows, purge, locks, notify."""

from __future__ import annotations

from nsj_queue_lib.runtime.service import service_lock_key
from tests.integration.store.backends import (
    EVERY_STORE,
    LOCKING,
    MYSQL,
    POSTGRES,
    SINGLESTORE,
    ago,
    on,
)

pytestmark = on(*EVERY_STORE)


def test_promote_due_is_bounded_and_leaves_future_rows(backend, store, worker):
    due = backend.enqueue(*[dict(chave_externa=str(n), data_hora=ago(10 + n)) for n in range(5)])
    future = backend.enqueue(data_hora=ago(-3600))
    backend.execute(f"UPDATE {backend.table} SET status = 'agendada'")
    assert store.promote_due(worker, 3) == 3
    assert store.promote_due(worker, 3) == 2
    assert store.promote_due(worker, 3) == 0
    statuses = backend.statuses()
    assert [statuses[i] for i in due] == ["pendente"] * 5 and statuses[future] == "agendada"


def test_waiting_rows_and_next_due(backend, store, worker):
    assert store.seconds_until_next_due(worker) is None
    assert store.has_stale_pending(worker, 1) is False
    backend.enqueue(data_hora=ago(10))
    assert store.has_stale_pending(worker, 5) is True
    assert store.has_stale_pending(worker, 60) is False
    backend.enqueue(data_hora=ago(-120))
    assert 110 < store.seconds_until_next_due(worker) <= 120
    # A retry waiting for its time counts too; one already due says "now" (negative).
    retry = backend.enqueue(data_hora=ago(5))
    backend.set_status("agendada", retry)
    assert store.seconds_until_next_due(worker) < 0


@on(POSTGRES, MYSQL, SINGLESTORE)  # the partitioned layout drops days: its own tests
def test_purge_is_bounded_and_never_touches_active_rows(backend, store, worker):
    old = ago(40 * 86400)
    settled = backend.enqueue(*[dict(chave_externa=f"old{n}", data_hora=old) for n in range(5)])
    backend.set_status("sucesso", *settled)
    active = backend.enqueue(*[dict(chave_externa=f"active{n}", data_hora=old) for n in range(3)])
    for task_id, status in zip(active, ("pendente", "agendada", "processando"), strict=True):
        backend.set_status(status, task_id)
    young = backend.enqueue(chave_externa="young")
    backend.set_status("sucesso", young)
    # A failed first attempt whose retry is still waiting keeps its payload.
    chain_first = backend.enqueue(chave_externa="chain", data_hora=old)
    chain_next = backend.enqueue(chave_externa="chain-next", data_hora=old)
    backend.set_status("falha", chain_first)
    backend.execute(
        f"UPDATE {backend.table} SET status = 'agendada', id_inicial = %s, payload = NULL "
        "WHERE id = %s",
        (chain_first, chain_next),
    )

    assert [store.purge_round(worker, 30, 2) for _ in range(4)] == [2, 2, 1, 0]
    assert set(backend.statuses()) == set(active) | {young, chain_first, chain_next}
    # Once the chain is settled, its rows go too.
    backend.set_status("sucesso", chain_next)
    assert store.purge_round(worker, 30, 10) == 2


def test_notify_wakes_listeners_where_the_database_has_them(backend, store, worker):
    """PostgreSQL delivers NOTIFY; elsewhere workers poll (or the socket server wakes them)."""
    if not backend.driver.capabilities.listen_notify:
        marker = backend.sent_marker(worker)
        store.notify(worker, "fila", "HALT")
        assert not backend.sent_since(worker, marker)
        return
    listener = backend.worker(executor=False)
    listener.execute(f'LISTEN "{backend.queue.name}"')
    store.notify(worker, backend.queue.name, "HALT")
    [notification] = list(listener.notifies(timeout=5, stop_after=1))
    assert (notification.channel, notification.payload) == (backend.queue.name, "HALT")


@on(*LOCKING)
def test_service_lock_is_held_by_one_connection(backend, store, worker):
    # The queue's own key: PostgreSQL's one-bigint locks are database-wide, and the suite
    # runs this test on several backends at once.
    key = service_lock_key(backend.table, "test")
    other = backend.worker(executor=False)
    assert store.try_service_lock(worker, key) is True
    assert store.try_service_lock(other, key) is False
    store.service_unlock(worker, key)
    assert store.try_service_lock(other, key) is True
    assert store.try_service_lock(worker, key) is False
    backend.terminate(other)  # a session's locks end with it
    assert store.try_service_lock(worker, key) is True


def test_depth_counts_the_tasks_with_work_ahead_per_processo_and_status(backend, worker):
    inspection = backend.driver.new_inspection_store(backend.table)
    assert inspection.depth(worker) == []
    ready = backend.enqueue(
        *[dict(processo="a", data_hora=ago(30)), dict(processo="a", data_hora=ago(5))]
    )
    backend.enqueue(dict(processo="a", data_hora=ago(-600)))  # 'pendente', due later
    running, waiting, done = backend.enqueue(*[dict(processo="b")] * 3)
    backend.set_status("processando", running)
    backend.set_status("agendada", waiting)
    backend.set_status("sucesso", done)
    rows = {(r["processo"], r["status"]): r for r in inspection.depth(worker)}
    assert {key: r["tasks"] for key, r in rows.items()} == {
        ("a", "pendente"): len(ready) + 1,  # a pendente task due later counts, it is not ready
        ("b", "processando"): 1,
        ("b", "agendada"): 1,
    }
    assert 29 <= rows[("a", "pendente")]["oldest_ready_seconds"] < 60
    assert rows[("b", "agendada")]["oldest_ready_seconds"] is None
