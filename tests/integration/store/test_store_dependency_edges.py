"""Each parent counts once in its child's count of unfinished parents (the edges' ``settled``
flag, nsj_queue_lib/workflow/dependencies.py), whatever the caller's snapshot, and two
settlements with shared children lock them in one order. On PostgreSQL and MariaDB."""

from __future__ import annotations

import threading

import pytest

from nsj_queue_lib.db.task_session import BURY, FINAL, FailureRecord, write_failure
from nsj_queue_lib.db.workflow_store import WorkflowStore
from tests.helpers.processes import wait_for
from tests.integration.store import backends
from tests.integration.store.backends import fetch

pytestmark = backends.on(backends.POSTGRES, backends.MYSQL)


def child_after(backend, *parents, **options):
    conn = backend.client_conn()
    child = backend.client(conn).insert_task(
        "o", "d", "p", None, "x", after=list(parents), **options
    )
    conn.commit()
    return child


def retried(backend, store, worker, task_id):
    """Fail the claimed attempt ``task_id`` with a retry due now: the retry's id, 'pendente'."""
    store.rollback_and_begin(worker)
    retry = store.fail_and_retry(worker, task_id, "falha", "boom", 0.0)
    backend.unlock(worker, task_id)
    store.commit(worker)
    assert store.promote_due(worker, 10) == 1
    return retry


def succeed(backend, store, worker, task_id, claims=3):
    """Claim and complete tasks until ``task_id`` is done (a dead letter may come first)."""
    for _ in range(claims):
        claimed = backend.claim(worker).id
        store.complete_and_claim(worker, claimed, "ok", claim_next=False)
        if claimed == task_id:
            return
    raise AssertionError(f"task {task_id} was not claimed")


def test_a_caller_with_an_old_snapshot_sees_the_parents_retry_succeed(backend, store, worker):
    """MySQL's REPEATABLE READ: the caller's snapshot predates the parent's retry, which
    then succeeds; the child must see the success, not the first attempt's 'retried'."""
    parent = backend.enqueue()
    conn = backend.client_conn()
    client = backend.client(conn)
    assert client.get_task(parent)["status"] == "pendente"  # the caller's snapshot
    store.bind(worker)
    assert backend.claim(worker).id == parent
    retry = retried(backend, store, worker, parent)
    succeed(backend, store, worker, retry)
    child = client.insert_task("o", "d", "p", None, "x", after=[parent])
    conn.commit()
    assert backend.row(child)["status"] == "pendente"


def test_an_attempt_and_its_retry_given_together_are_one_parent(backend, store, worker):
    parent = backend.enqueue()
    store.bind(worker)
    assert backend.claim(worker).id == parent
    retry = retried(backend, store, worker, parent)
    child = child_after(backend, parent, retry)
    assert backend.row(child)["status"] == "aguardando"
    succeed(backend, store, worker, retry)
    assert backend.row(child)["status"] == "pendente"


@pytest.mark.parametrize("kind", [BURY, FINAL])
def test_a_fenced_failure_that_wrote_nothing_leaves_the_children_waiting(
    backend, store, worker, kind
):
    """The retry service rescued the attempt (and inserted the next) while its handler ran;
    the handler's failure for good then changes no row, and must not cancel the children."""
    parent = backend.enqueue()
    child = child_after(backend, parent)
    store.bind(worker)
    assert backend.claim(worker).id == parent
    rescuer = backend.worker()
    store.begin(rescuer)
    assert store.fail_and_retry(rescuer, parent, "falha_processando", "lost", 0.0)
    store.commit(rescuer)
    store.rollback_and_begin(worker)
    record = FailureRecord(kind, "falha", "boom", payload="x")
    assert write_failure(store, worker, parent, record) is None
    store.commit(worker)
    assert backend.row(child)["status"] == "aguardando"


def test_a_dead_letter_retried_by_hand_is_not_counted_twice(backend, store, worker):
    """C after A and B with "run": A is dead-lettered (C counts it as finished), retried by
    hand, and succeeds; C still waits for B."""
    a, b = backend.enqueue(chave_externa="a"), backend.enqueue(chave_externa="b")
    c = child_after(backend, a, b, on_parent_failure="run")
    store.bind(worker)
    assert backend.claim(worker).id == a
    store.rollback_and_begin(worker)
    write_failure(store, worker, a, FailureRecord(BURY, "falha", "boom", payload="x"))
    backend.unlock(worker, a)
    store.commit(worker)
    conn = backend.client_conn()
    again = backend.client(conn).retry_task(a)
    conn.commit()
    backend.set_status("agendada", b)  # out of the claims' way until A's retry is done
    succeed(backend, store, worker, again)
    assert backend.row(c)["status"] == "aguardando"
    backend.set_status("pendente", b)
    succeed(backend, store, worker, b)
    assert backend.row(c)["status"] == "pendente"


def holding_the_last_child(backend, children, settle, status="pendente"):
    """``settle(conn)`` in a thread while another transaction holds the last child's count;
    True once every other child's count is locked (by the settlement, waiting there)."""
    waiting = f"{backend.table}_waiting"
    holder, settler, probe = backend.client_conn(), backend.client_conn(), backend.client_conn()
    fetch(holder, f"SELECT child_id FROM {waiting} WHERE child_id = %s FOR UPDATE", (children[-1],))
    errors: list[BaseException] = []

    def run():
        try:
            settle(settler)
            settler.commit()
        except BaseException as exc:  # asserted below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        free_sql = f"SELECT child_id FROM {waiting} ORDER BY child_id FOR UPDATE SKIP LOCKED"

        def all_taken():
            free = fetch(probe, free_sql)
            probe.rollback()
            return not free

        wait_for(all_taken, timeout=10, what="the settlement to lock every other child")
    finally:
        holder.rollback()
        thread.join(30)
    assert not errors, errors
    assert {backend.row(c)["status"] for c in children} == {status}


def one_slot(backend, n):
    """``n`` new tasks whose edges count in one slot of a child's count (PostgreSQL's
    slot: id / 8 % 32), so that a child of all of them has one count row to lock; a
    child of one unfinished parent has none there (its parent releases it by the edge)."""
    tasks = [backend.enqueue()]
    while len(tasks) < n:
        task = backend.enqueue()
        tasks = tasks + [task] if task // 8 == tasks[0] // 8 else [task]
    return tasks


def counting_one(backend, children):
    """Each child's count set to 1: its blocking parent's end is not waited for."""
    waiting = f"{backend.table}_waiting"
    for child in reversed(children):  # rows stored in descending id order (PostgreSQL's heap)
        backend.execute(f"UPDATE {waiting} SET pending_parents = 1 WHERE child_id = %s", (child,))


def test_a_settlement_locks_the_children_in_id_order(backend):
    """While another transaction holds the last child's count, a settlement of their
    parent waits there holding every other child's count: it took them in id order."""
    parent, blocker = one_slot(backend, 2)
    children = [child_after(backend, parent, blocker) for _ in range(24)]
    counting_one(backend, children)
    wstore = WorkflowStore(backend.dialect, backend.table)
    holding_the_last_child(
        backend, children, lambda conn: wstore.release_after_success(conn, [parent])
    )


def test_a_group_end_locks_the_children_of_all_its_parents_in_id_order(backend):
    """A commit group settling two parents: the children of both in one id order, not
    parent by parent (the first parent's child has the higher id)."""
    first, second, blocker = one_slot(backend, 3)
    low = child_after(backend, second, blocker)
    high = child_after(backend, first, blocker)
    counting_one(backend, [low, high])
    wstore = WorkflowStore(backend.dialect, backend.table)
    holding_the_last_child(
        backend,
        [low, high],
        lambda conn: wstore.release_after_success_of_attempts(conn, [first, second]),
    )


def test_a_cancel_cascade_locks_the_grandchildren_in_id_order(backend):
    """A cancelled parent cancels its two children, whose children (the lower id after the
    second child) are then cancelled with their counts locked in one id order."""
    parent = backend.enqueue()
    first, second = child_after(backend, parent), child_after(backend, parent)
    low = child_after(backend, second)
    high = child_after(backend, first)
    holding_the_last_child(
        backend,
        [first, second, low, high],
        lambda conn: backend.client(conn).cancel_task(parent),
        status="cancelada",
    )


def test_the_upgrade_adds_the_edges_settled_flag(backend, store, worker):
    """A queue made before the flag (its parents table lacks it) gets it from --upgrade."""
    backend.execute(f"ALTER TABLE {backend.table}_parents DROP COLUMN settled")
    backend.upgrade()
    parent = backend.enqueue()
    child = child_after(backend, parent)
    store.bind(worker)
    succeed(backend, store, worker, parent)
    assert backend.row(child)["status"] == "pendente"


def test_a_settlement_takes_a_free_slot_instead_of_waiting(backend):
    """PostgreSQL's count is split in slots, shares of the count: a parent's settlement
    counts down whichever slot is free, so it does not wait for another transaction
    holding the slot its own edge was counted in."""
    if backend.dialect != "postgres":
        pytest.skip("MySQL/MariaDB keep one count per child")
    parents = [backend.enqueue() for _ in range(17)]
    first, last = parents[0], parents[-1]  # 16 ids apart: two slots
    child = child_after(backend, first, last)
    waiting = f"{backend.table}_waiting"
    holder, settler = backend.client_conn(), backend.client_conn()
    slot = fetch(
        holder,
        f"SELECT slot FROM {waiting} WHERE child_id = %s AND slot = %s FOR UPDATE",
        (child, first // 8 % 32),
    )
    assert slot, "the first parent's slot"
    backends.execute(settler, "SET lock_timeout = '5s'")  # an error, not a hang, if it waits
    WorkflowStore(backend.dialect, backend.table).release_after_success(settler, [first])
    settler.commit()
    holder.rollback()
    counts = fetch(
        holder, f"SELECT slot, pending_parents FROM {waiting} WHERE child_id = %s", (child,)
    )
    holder.rollback()
    assert sorted(row["pending_parents"] for row in counts) == [0, 1]
    assert backend.row(child)["status"] == "aguardando"


def test_a_settlement_takes_its_count_from_several_free_slots(backend):
    """Two parents settled at once need two from a count whose slots hold one each: the
    settlement takes them from the two free slots, slot by slot, and does not wait for
    the lowest one, held by another transaction."""
    if backend.dialect != "postgres":
        pytest.skip("MySQL/MariaDB keep one count per child")
    parents = [backend.enqueue() for _ in range(17)]
    spread = [parents[0], parents[8], parents[16]]  # 8 ids apart: three slots of one
    child = child_after(backend, *spread)
    waiting = f"{backend.table}_waiting"
    holder, settler = backend.client_conn(), backend.client_conn()
    held = fetch(
        holder,
        f"SELECT slot FROM {waiting} WHERE child_id = %s ORDER BY slot LIMIT 1 FOR UPDATE",
        (child,),
    )
    assert held, "the lowest slot"
    backends.execute(settler, "SET lock_timeout = '5s'")  # an error, not a hang, if it waits
    WorkflowStore(backend.dialect, backend.table).release_after_success(settler, spread[1:])
    settler.commit()
    holder.rollback()
    counts = fetch(
        holder, f"SELECT slot, pending_parents FROM {waiting} WHERE child_id = %s", (child,)
    )
    holder.rollback()
    by_slot = {row["slot"]: row["pending_parents"] for row in counts}
    assert by_slot.pop(held[0]["slot"]) == 1 and set(by_slot.values()) == {0}
    assert backend.row(child)["status"] == "aguardando"


def test_concurrent_settlements_release_a_fan_in_once(backend):
    """Four transactions settle a fan-in's 96 parents in overlapping groups, each holding
    what it took until a delayed commit: the child is released by the last, once, and
    its count ends at 0 in every slot (none below)."""
    if backend.dialect != "postgres":
        pytest.skip("MySQL/MariaDB keep one count per child")
    parents = [backend.enqueue() for _ in range(96)]
    child = child_after(backend, *parents)
    wstore = WorkflowStore(backend.dialect, backend.table)
    groups = [parents[start : start + 6] for start in range(0, len(parents), 6)]
    errors: list[BaseException] = []

    def settle(groups_of_thread):
        conn = backend.client_conn()
        try:
            for group in groups_of_thread:
                wstore.release_after_success(conn, group)
                threading.Event().wait(0.01)  # holding its slots meanwhile
                conn.commit()
        except BaseException as exc:  # asserted below
            errors.append(exc)
            conn.rollback()

    threads = [threading.Thread(target=settle, args=(groups[k::4],)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    counts = [
        row["pending_parents"]
        for row in fetch(
            backend.client_conn(),
            f"SELECT pending_parents FROM {backend.table}_waiting WHERE child_id = %s",
            (child,),
        )
    ]
    assert counts and set(counts) == {0}
    assert backend.row(child)["status"] == "pendente"
