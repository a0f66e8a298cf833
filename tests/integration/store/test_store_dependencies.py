"""Every path that writes a task's 'sucesso' releases its waiting children in the same
transaction (nsj_queue_lib/workflow/): the claim routine's completion with and without a
next claim, the completion under an outside lock (complete_if_running), and a commit
group's end; a failure written for good cancels them. On PostgreSQL (plain and
partitioned) and MariaDB."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nsj_queue_lib.db.task_session import BURY, RETRY, ClaimPhases, FailureRecord, write_failure


def family(backend, after, **options):
    """A committed parent and a child after it: their ids."""
    [parent] = [backend.enqueue()]
    conn = backend.client_conn()
    child = backend.client(conn).insert_task("o", "d", "p", None, "x", after=[parent], **options)
    conn.commit()
    return parent, child


@pytest.mark.parametrize("claim_next", [True, False])
def test_the_claim_routines_completion_releases_the_child(backend, store, worker, claim_next):
    parent, child = family(backend, after=True)
    assert backend.row(child)["status"] == "aguardando"
    store.bind(worker)
    assert store.claim(worker).task.id == parent
    claimed = store.complete_and_claim(worker, parent, "ok", claim_next=claim_next)
    if claim_next:
        assert claimed.task.id == child  # released in the commit the claim came with
        store.complete_and_claim(worker, child, "ok", claim_next=False)
        assert backend.row(child)["status"] == "sucesso"
    else:
        assert claimed is None and backend.row(child)["status"] == "pendente"


def test_a_completion_under_an_outside_lock_releases_the_child(backend, store, worker):
    parent, child = family(backend, after=True)
    store.bind(worker)
    store.begin(worker)
    assert store.claim_uncommitted(worker).id == parent
    store.commit_and_begin(worker)
    assert store.complete_if_running(worker, parent, "ok")
    assert backend.row(child)["status"] == "aguardando"  # not committed yet
    store.commit(worker)
    assert backend.row(child)["status"] == "pendente"


@pytest.mark.parametrize("path", ["group end", "outside lock"])
def test_a_retried_parents_success_releases_the_child_on_every_path(backend, store, worker, path):
    """The child's edge names the parent's first attempt; its retry, a row of its own,
    succeeds through a commit group's end (MariaDB's statement; PostgreSQL's settle
    function) or a completion under an outside lock, and releases the child."""
    parent, child = family(backend, after=True)
    store.bind(worker)
    assert backend.claim(worker).id == parent
    store.rollback_and_begin(worker)
    retry = write_failure(store, worker, parent, FailureRecord(RETRY, "falha", "boom", 0.0))
    backend.unlock(worker, parent)
    store.commit(worker)
    assert store.promote_due(worker, 10) == 1  # 'agendada' -> 'pendente'
    task = backend.claim(worker)
    assert task.id == retry != parent and task.first_id == parent
    if path == "outside lock":
        assert ClaimPhases(store).complete_fenced(worker, task.id, "ok", task.first_id)
    elif backend.dialect == "postgres":
        assert store.complete_if_running(worker, task.id, "ok")
        store.commit(worker)
    else:
        from nsj_queue_lib.db.mysql.session import MysqlTaskSession
        from nsj_queue_lib.runtime.liveness import DatabaseLiveness

        session = MysqlTaskSession(store, DatabaseLiveness(store))
        session.settle_group(worker, SimpleNamespace(written=[(task, "ok")], tx=None), 0)
    assert backend.row(child)["status"] == "pendente"


def test_a_release_reads_its_childrens_rows_not_every_waiting_task(backend, store, worker):
    """MariaDB 10.11 ran the release procedure's UPDATE ... WHERE id IN (subquery) once per
    waiting task of the queue: each parent's success read all of them (623 handler reads to
    release one child with 300 others waiting). It joins from the parent's edges now."""
    if backend.dialect == "postgres":
        pytest.skip("counts MariaDB's handler reads (PostgreSQL's release is a function)")
    parent, child = family(backend, after=True)
    other = backend.enqueue()
    backend.enqueue(*[{"chave_externa": f"w{n}", "after": [other]} for n in range(300)])
    store.bind(worker)
    assert backend.claim(worker).id == parent

    def reads() -> int:
        with worker.cursor() as cursor:
            cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read_%'")
            return sum(int(value) for _, value in cursor.fetchall())

    before = reads()
    assert store.complete_and_claim(worker, parent, "ok", claim_next=False) is None
    spent = reads() - before
    assert spent < 100, spent
    assert backend.row(child)["status"] == "pendente"


def test_a_buried_parent_cancels_the_child_and_a_run_child_is_released(backend, store, worker):
    parent, child = family(backend, after=True)
    conn = backend.client_conn()
    runs = backend.client(conn).insert_task(
        "o", "d", "p", None, "x", after=[parent], on_parent_failure="run"
    )
    conn.commit()
    store.bind(worker)
    assert store.claim(worker).task.id == parent
    store.rollback_and_begin(worker)
    write_failure(store, worker, parent, FailureRecord(BURY, "falha", "boom", payload="x"))
    store.commit(worker)
    assert backend.row(child)["status"] == "cancelada"
    assert f"parent task {parent} " in backend.row(child)["mensagem"]
    assert backend.row(runs)["status"] == "pendente"


def test_a_waiting_child_is_written_by_its_insert_alone(backend):
    """PostgreSQL writes a child 'aguardando' in its INSERT: no second row version (the
    first, 'pendente', stayed in the claim index until a vacuum). A child whose parent
    has finished is still written 'pendente'."""
    if backend.dialect != "postgres":
        pytest.skip("MySQL/MariaDB insert the child, then set it waiting")
    [parent] = [backend.enqueue()]
    conn = backend.client_conn()
    client = backend.client(conn)
    child = client.insert_task("o", "d", "p", None, "x", after=[parent])
    updates = conn.execute(
        "SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relid = %s::regclass",
        (backend.table,),
    ).fetchone()
    conn.commit()
    assert backend.row(child)["status"] == "aguardando"
    assert updates == (0,)
