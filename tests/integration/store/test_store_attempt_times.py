"""Each attempt's timeline: ``started_at`` and ``worker`` written by the claim, ``finished_at``
by whatever ends the attempt, in the statements that already run (docs/reference/queue-table.md).

Every claim path and every end of an attempt is here, on every store: the claim the
store's runtime uses (with session locks, or without them for the socket server), a
commit group's claim and end, the success that claims the next task, each kind of
failure, a cancel, and the give-back of a task that never started.
"""

from __future__ import annotations

import types

import pytest

from nsj_queue_lib import model
from nsj_queue_lib.db.limits_store import LimitsStore
from nsj_queue_lib.flow.limits import ProcessoLimits
from nsj_queue_lib.runtime.liveness import DatabaseLiveness
from tests.integration.store.backends import EVERY_STORE, LOCKING, on

pytestmark = on(*EVERY_STORE)

WORKER = "pod-7:4242:0a1b2c3d"


@pytest.fixture
def stamped(backend):
    """The backend's store, naming its claims' worker."""
    backend.store.set_worker_name(WORKER)
    return backend.store


def timeline(backend, task_id: int) -> tuple:
    row = backend.row(task_id)
    return row["started_at"], row["finished_at"], row["worker"]


def test_a_waiting_task_has_no_timeline(backend):
    task_id = backend.enqueue()
    assert timeline(backend, task_id) == (None, None, None)


def test_the_claim_stamps_the_start_and_the_worker_and_the_success_the_end(backend, stamped):
    task_id = backend.enqueue()
    worker = backend.worker()
    before = backend.now()
    task = backend.claim(worker)
    assert task.id == task_id
    started, finished, name = timeline(backend, task_id)
    assert name == WORKER and finished is None
    assert before <= started <= backend.now()
    assert stamped.complete_if_running(worker, task_id, "ok")
    stamped.commit(worker)
    again, finished, name = timeline(backend, task_id)
    assert again == started and name == WORKER
    assert started <= finished <= backend.now()


@on(*LOCKING)
def test_the_success_that_claims_the_next_task_ends_one_and_starts_the_other(backend, stamped):
    first, second = backend.enqueue({}, {})
    worker = backend.worker()
    assert backend.claim(worker).id == first
    claimed = stamped.complete_and_claim(worker, first, "ok", True)
    assert claimed.task.id == second
    _, ended, _ = timeline(backend, first)
    started, finished, name = timeline(backend, second)
    assert ended is not None and finished is None and name == WORKER
    assert ended <= started
    stamped.rollback(worker)


@on(*LOCKING)
def test_the_limited_claim_stamps_the_start_and_the_worker(backend, stamped):
    limits = LimitsStore(backend.dialect, backend.table, stamped)
    admin = backend.client_conn()
    limits.declare(admin, ProcessoLimits("limitado", max_concurrent=1), "test")
    admin.commit()
    task_id = backend.enqueue(processo="limitado")
    worker = backend.worker()
    assert limits.claim(worker, take_lock=True).task.id == task_id
    started, finished, name = timeline(backend, task_id)
    assert started is not None and finished is None and name == WORKER
    stamped.rollback(worker)


def test_a_commit_group_stamps_each_of_its_tasks(backend, stamped):
    session = backend.driver.session(stamped, DatabaseLiveness(stamped))
    if not session.groups:
        pytest.skip("no group commit on this backend")
    ids = backend.enqueue({}, {}, {})
    worker = backend.worker()
    claims = session.claim_group(worker, 10)
    assert sorted(c.task.id for c in claims) == sorted(ids)
    group = types.SimpleNamespace(tx=None, written=[], processes=None)
    for claim in claims:
        session.succeeded(worker, claim.task, "ok")
        group.written.append((claim.task, "ok"))
    session.settle_group(worker, group, 0)
    for task_id in ids:
        started, finished, name = timeline(backend, task_id)
        assert name == WORKER and started <= finished, task_id
    assert set(backend.statuses().values()) == {model.SUCESSO}


@pytest.mark.parametrize("scenario", ["retry", "bury", "final", "cancelled"])
def test_every_failure_ends_the_attempt_and_its_next_attempt_starts_blank(
    backend, stamped, scenario
):
    task_id = backend.enqueue()
    worker = backend.worker()
    task = backend.claim(worker)
    stamped.rollback(worker)  # the handler failed: its work is rolled back
    stamped.begin(worker)
    if scenario == "retry":
        after = stamped.fail_and_retry(worker, task.id, model.FALHA, "boom", 60.0)
    elif scenario == "bury":
        after = stamped.fail_and_bury(worker, task.id, model.FALHA, "boom", task.payload)
    elif scenario == "final":
        assert stamped.fail_final(worker, task.id, model.FALHA, "boom")
        after = None
    else:
        assert stamped.cancel_running(worker, task.id, "stopped")
        after = None
    stamped.commit(worker)
    started, finished, name = timeline(backend, task_id)
    assert name == WORKER and started <= finished
    if after is not None:
        assert timeline(backend, after) == (None, None, None)


def test_a_task_given_back_unstarted_loses_its_start_and_worker(backend, stamped):
    task_id = backend.enqueue()
    worker = backend.worker()
    backend.claim(worker)
    assert stamped.release(worker, task_id)
    stamped.commit(worker)
    assert backend.row(task_id)["status"] == model.PENDENTE
    assert timeline(backend, task_id) == (None, None, None)


def test_a_waiting_task_cancelled_ends_without_a_start(backend):
    task_id = backend.enqueue()
    conn = backend.client_conn()
    assert backend.client(conn).cancel_task(task_id) == model.CANCELADA
    conn.commit()
    started, finished, name = timeline(backend, task_id)
    assert started is None and name is None and finished is not None


def test_a_running_task_asked_to_cancel_keeps_running_unended(backend, stamped):
    task_id = backend.enqueue()
    worker = backend.worker()
    backend.claim(worker)
    stamped.commit(worker)
    conn = backend.client_conn()
    assert backend.client(conn).cancel_task(task_id) == model.PROCESSANDO
    conn.commit()
    started, finished, name = timeline(backend, task_id)
    assert started is not None and name == WORKER and finished is None
