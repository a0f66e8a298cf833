"""The limited claim routine (claim_limited_<queue>_v<N>, db/<dialect>/limited_claim.sql)
called directly, on PostgreSQL and MariaDB: it waits in the database until a start is due,
lets a late rate limiter catch up by at most 8% of the period, and skips a task that the
unique index of running lock keys refuses (as the ordinary claims do)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from nsj_queue_lib.db.limits_store import LimitsStore
from nsj_queue_lib.flow.limits import CAP_RECHECK_SECONDS, ProcessoLimits
from tests.helpers.processes import wait_for
from tests.integration.store import backends
from tests.integration.store.backends import execute, fetch
from tests.integration.store.test_store_lock_key_race import _waits_for_a_lock

pytestmark = pytest.mark.timeout(60)

LIMITED = "limitado"


def limits_store(backend, **limits: Any) -> LimitsStore:
    store = LimitsStore(backend.dialect, backend.table, backend.store)
    admin = backend.client_conn()
    store.declare(admin, ProcessoLimits(LIMITED, **limits), "test")
    admin.commit()
    return store


def test_the_claim_waits_in_the_database_until_the_next_start_is_due(backend):
    # A whole second between starts: the steps below take a fair part of it on a loaded
    # machine (load 20 seen), whatever the layout.
    store = limits_store(backend, interval_min_s=1.0, interval_max_s=1.0)
    first, second = backend.enqueue(dict(processo=LIMITED), dict(processo=LIMITED))
    worker = backend.worker()
    called = time.monotonic()
    claimed = store.claim(worker, take_lock=True)
    took = time.monotonic() - called
    assert claimed.task is not None and claimed.task.id == first
    # The next start is 1 s after this one; the wait is read at the routine's end.
    assert 1.0 - took - 0.02 <= claimed.wait <= 1.0 + 0.01
    backend.store.rollback(worker)
    # Called too early (beyond the routine's wait ahead): nothing, and when to come back.
    too_early = store.claim(worker, take_lock=True, early=0.01)
    assert too_early.task is None and 0.4 < too_early.wait <= 1.0
    assert not too_early.in_transaction and not backend.in_transaction(worker)
    # Called ahead, within its wait: the routine starts the task at the due moment.
    started = time.monotonic()
    claimed = store.claim(worker, take_lock=True, early=1.5)
    assert claimed.task is not None and claimed.task.id == second
    assert time.monotonic() - started >= 0.3
    assert backend.statuses()[second] == "processando"
    assert claimed.locked and backend.liveness_lock_holder(second) is not None


def test_a_late_rate_limiter_catches_up_eight_percent_of_the_period_and_no_more(backend):
    store = limits_store(backend, rate_count=1, rate_period_s=1.0)
    backend.enqueue(*[dict(processo=LIMITED)] * 3)
    worker = backend.worker()
    assert store.claim(worker, take_lock=True).task is not None  # never started: now
    backend.store.rollback(worker)
    # Its theoretical arrival time far behind: it keeps 80 ms of credit, not more.
    execute(
        backend.admin,
        f"UPDATE {backend.table}_limits SET rate_tat = %s WHERE processo = %s",
        (backend.now().replace(year=2020), LIMITED),
    )
    claimed = store.claim(worker, take_lock=True)
    assert claimed.task is not None
    assert claimed.wait == pytest.approx(1.0 - 0.08, abs=0.05)


def test_a_task_the_unique_index_of_running_keys_refuses_is_skipped(backend):
    """A task of another processo with the same lock_key is claimed (not committed yet)
    while the limited claim's snapshot sees the key free: the limited claim waits for
    that commit, is refused, skips the keyed task and takes the next one."""
    store = limits_store(backend, max_concurrent=5)
    other = backend.enqueue(processo="outro", lock_key="k")
    keyed = backend.enqueue(processo=LIMITED, lock_key="k", prioridade=90)
    plain = backend.enqueue(processo=LIMITED, prioridade=10)
    holder = backend.client_conn()
    execute(holder, f"UPDATE {backend.table} SET status = 'processando' WHERE id = %s", (other,))

    worker = backend.worker()
    outcome: dict[str, Any] = {}

    def claim() -> None:
        try:
            outcome["claim"] = store.claim(worker, take_lock=True)
        except BaseException as exc:  # the test reads it below
            outcome["error"] = exc

    thread = threading.Thread(target=claim)
    thread.start()
    wait_for(
        lambda: not thread.is_alive() or _waits_for_a_lock(backend, backend.session_id(worker)),
        20,
        "the limited claim to wait for the other claim's commit",
        interval=0.25,
    )
    holder.commit()
    thread.join(20)
    assert not thread.is_alive()
    assert "error" not in outcome, outcome
    assert outcome["claim"].task is not None and outcome["claim"].task.id == plain
    assert backend.statuses() == {other: "processando", keyed: "pendente", plain: "processando"}
    assert backend.liveness_lock_holder(keyed) is None


def test_without_the_lock_the_claim_stays_uncommitted_for_the_socket_servers_lock(backend):
    """CLIENT_SERVER_MODE: the claim's transaction stays open (the worker takes the socket
    server's lock, then commits); until then everyone else sees the task 'pendente'."""
    store = limits_store(backend, max_concurrent=2)
    task = backend.enqueue(processo=LIMITED)
    worker = backend.worker()
    claimed = store.claim(worker, take_lock=False)
    assert claimed.task is not None and claimed.task.id == task and claimed.locked is None
    assert claimed.in_transaction and backend.in_transaction(worker)
    assert backend.statuses() == {task: "pendente"}
    assert backend.liveness_lock_holder(task) is None
    backend.store.commit_and_begin(worker)
    assert backend.statuses() == {task: "processando"}


def test_the_limited_claim_takes_only_the_processos_the_worker_handles(backend):
    """Issue 37: a limited processo of another deployment is left to it."""
    store = limits_store(backend, max_concurrent=5)
    task_id = backend.enqueue(processo=LIMITED)
    worker = backend.worker()
    backend.store.set_handled_processos(frozenset({"outro"}))
    assert store.claim(worker, take_lock=True).task is None
    assert backend.statuses()[task_id] == "pendente"
    backend.store.set_handled_processos(frozenset({LIMITED}))
    claimed = store.claim(worker, take_lock=True)
    assert claimed.task is not None and claimed.task.id == task_id
    backend.store.rollback(worker)


def test_a_fair_key_at_its_max_concurrent_per_key_is_passed_over_not_claimed(backend):
    """max_concurrent_per_key=1: the first ready task of a key that has a task running is
    left 'pendente' and the claim takes the next key's (or an unkeyed task, never capped);
    once every ready task's key is at its cap, nothing is claimed and the worker is told to
    look again after the cap's recheck (not at once: it would spin)."""
    store = limits_store(backend, max_concurrent_per_key=1)
    a1 = backend.enqueue(processo=LIMITED, fair_key="a", prioridade=90)
    a2 = backend.enqueue(processo=LIMITED, fair_key="a", prioridade=80)
    b1 = backend.enqueue(processo=LIMITED, fair_key="b", prioridade=10)
    plain = backend.enqueue(processo=LIMITED, prioridade=5)
    workers = [backend.worker() for _ in range(4)]
    claimed = [store.claim(w, take_lock=True) for w in workers[:3]]
    assert [c.task.id if c.task else None for c in claimed] == [a1, b1, plain]
    for worker in workers[:3]:
        backend.store.rollback(worker)  # the claims are committed: the tasks run on
    nothing = store.claim(workers[3], take_lock=True)
    assert nothing.task is None and not nothing.in_transaction
    assert nothing.wait == pytest.approx(CAP_RECHECK_SECONDS)
    assert backend.statuses()[a2] == "pendente"
    backend.execute(f"UPDATE {backend.table} SET status = 'sucesso' WHERE {backend.where_id(a1)}")
    after = store.claim(workers[3], take_lock=True)
    assert after.task is not None and after.task.id == a2
    backend.store.rollback(workers[3])


def test_max_concurrent_per_key_counts_the_running_tasks_of_its_processo_only(backend):
    """Another processo's running tasks of the same fair key take none of the cap, and a
    processo without the cap is not held back by its running tasks."""
    store = limits_store(backend, max_concurrent_per_key=2)
    other = backend.enqueue(*[dict(processo="outro", fair_key="a")] * 2)
    backend.execute(
        f"UPDATE {backend.table} SET status = 'processando' WHERE id IN ({other[0]}, {other[1]})"
    )
    mine = backend.enqueue(*[dict(processo=LIMITED, fair_key="a")] * 3)
    workers = [backend.worker() for _ in range(3)]
    got = [store.claim(w, take_lock=True).task for w in workers]
    assert [t.id if t else None for t in got] == [mine[0], mine[1], None]
    for worker in workers:
        backend.store.rollback(worker)


@backends.on(backends.POSTGRES, backends.MYSQL)
def test_the_upgrade_adds_max_concurrent_per_key_to_an_earlier_limits_table(backend):
    backend.execute(f"ALTER TABLE {backend.table}_limits DROP COLUMN max_concurrent_per_key")
    backend.upgrade()
    store = limits_store(backend, max_concurrent_per_key=1)
    store.check(backend.worker())  # the routine is this version's
    [row] = fetch(backend.admin, f"SELECT max_concurrent_per_key FROM {backend.table}_limits")
    assert row["max_concurrent_per_key"] == 1
    first, _ = backend.enqueue(*[dict(processo=LIMITED, fair_key="a")] * 2)
    workers = [backend.worker(), backend.worker()]
    claimed = [store.claim(w, take_lock=True).task for w in workers]
    assert [t.id if t else None for t in claimed] == [first, None]
    for worker in workers:
        backend.store.rollback(worker)
