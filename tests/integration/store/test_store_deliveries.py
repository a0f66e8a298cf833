"""A worker claims only the pub/sub deliveries it can handle (docs/pubsub.md), on
PostgreSQL and MariaDB, through the claim routine and the socket-server claim.

A delivery of a subscriber the worker has no method for is not claimed (it is not
claimed and failed, nor dead-lettered): it stays 'pendente' for a worker that
handles it. A plain ``WorkerBase`` claims no delivery; a ``WorkerPubSubBase`` with
``webhook_fallback`` (the default) claims every one.
"""

from __future__ import annotations

import pytest

from nsj_queue_lib import Subscriber, WorkerBase, WorkerPubSubBase
from tests.helpers.worker_harness import running, wait_until
from tests.integration.store.backends import _settings, execute

pytestmark = pytest.mark.timeout(60)


def _delivery(backend, subscriber_id: str) -> int:
    """A committed delivery row of ``subscriber_id`` (as the fan-out writes it)."""
    task_id = backend.enqueue(chave_externa=f"entrega-{subscriber_id}")
    backend.execute(
        f"UPDATE {backend.table} SET subscriber_id = %s, publication_id = %s WHERE id = %s",
        (subscriber_id, task_id, task_id),
    )
    return int(task_id)


def _claim(backend, path: str):
    # A new session each time: MySQL's claim procedure resumes from its session's last claim.
    worker = backend.worker()
    if path == "routine":
        claimed = backend.store.claim(worker)
        task = None if claimed is None else claimed.task
    else:
        task = backend.store.claim_uncommitted(worker)
    if task is not None:  # back to 'pendente' for the next claim
        backend.store.rollback(worker)
        if path == "routine":  # the routine's claim was committed
            backend.unlock(worker, task.id)
            backend.set_status("pendente", task.id)
    return None if task is None else task.id


@pytest.mark.parametrize("path", ["routine", "socket"])
def test_the_claim_skips_deliveries_of_subscribers_the_worker_does_not_handle(backend, path):
    delivery_a = _delivery(backend, "a")
    delivery_b = _delivery(backend, "b")
    plain = backend.enqueue(chave_externa="plain", prioridade=10)  # last in claim order
    store = backend.store
    # A plain worker: no delivery, whatever comes first.
    store.set_handled_subscribers(frozenset())
    assert _claim(backend, path) == plain
    # Subscriber "a" only (a quoted id too: the list is data, never SQL).
    store.set_handled_subscribers(frozenset({"a", 'x"y\\z'}))
    assert _claim(backend, path) == delivery_a
    store.set_handled_subscribers(frozenset({"b"}))
    assert _claim(backend, path) == delivery_b
    # Every subscriber (a webhook worker).
    store.set_handled_subscribers(None)
    assert _claim(backend, path) == delivery_a
    assert set(backend.statuses().values()) == {"pendente"}


class OnlyA(WorkerPubSubBase):
    webhook_fallback = False

    @Subscriber("a")
    def handle_a(self, payload, subscription, tarefa, bd_conn) -> str:
        return "a handled"


class Plain(WorkerBase):
    def execute(self, payload, tarefa, bd_conn) -> str:
        return f"plain handled {tarefa['subscriber_id']}"


def test_an_unhandled_delivery_waits_pendente_while_workers_run(backend):
    for subscriber_id in ("a", "b"):  # "b": no method anywhere, no url
        execute(
            backend.admin,
            f"INSERT INTO {backend.subscriber_table} (id, processo) VALUES (%s, 'evento')",
            (subscriber_id,),
        )
    client_conn = backend.client_conn()
    publication = backend.client(client_conn).insert_task_pub_sub(
        "erp", "fiscal", "evento", "pedido-1", {"n": 1}
    )
    client_conn.commit()
    settings = _settings(backend.kind, backend.queue, backend_db(backend)).with_changes(
        queue_concurrency=2,
        queue_wait_notify_interval=0.3,
        queue_retry_thread_interval=0.3,
        queue_notify_thread_interval=0.3,
        queue_purge_thread_interval=3600,
        queue_grace_period=2.0,
    )

    def deliveries() -> dict[str, str]:
        return {
            r["subscriber_id"]: r["status"]
            for r in backend.rows()
            if r["subscriber_id"] is not None
        }

    # The plain worker publishes (a publication is anyone's), then claims no delivery.
    with running(Plain(settings)):
        wait_until(lambda: backend.row(publication)["status"] == "sucesso", what="the fan-out")
        wait_until(lambda: len(deliveries()) == 2, what="two deliveries")
        with running(OnlyA(settings)):
            wait_until(lambda: deliveries().get("a") == "sucesso", what="delivery a")
        assert deliveries() == {"a": "sucesso", "b": "pendente"}
    done = [r for r in backend.rows() if r["subscriber_id"] == "a"]
    assert [r["mensagem"] for r in done] == ["a handled"]  # OnlyA's, not Plain's
    assert len(backend.rows()) == 3  # no retry, no dead letter: nothing failed


def backend_db(backend) -> dict:
    """The db_* connection values the backend's own settings were built from."""
    if backend.dialect == "postgres":
        from tests.helpers.processes import dsn_params

        info = dsn_params(backend.connect_args)
        return dict(info, name=info["dbname"])
    return dict(backend.connect_args, name=backend.connect_args["database"])


@pytest.mark.parametrize("path", ["routine", "socket"])
def test_the_claim_takes_only_the_processos_the_worker_handles(backend, path):
    """Issue 37: deployments that share a table, each with its own processos."""
    beta = backend.enqueue(processo="beta", chave_externa="beta")  # first in claim order
    alpha = backend.enqueue(processo="alpha", chave_externa="alpha")
    quoted = backend.enqueue(processo="q\"u\\o'te", chave_externa="quoted")
    store = backend.store
    store.set_handled_processos(frozenset({"alpha"}))
    assert _claim(backend, path) == alpha
    store.set_handled_processos(frozenset({"q\"u\\o'te", "gamma"}))  # data, never SQL
    assert _claim(backend, path) == quoted
    store.set_handled_processos(frozenset({"gamma"}))
    assert _claim(backend, path) is None
    store.set_handled_processos(None)  # a worker that overrides execute: every processo
    assert _claim(backend, path) == beta
    assert set(backend.statuses().values()) == {"pendente"}


def test_a_group_claims_only_the_processos_the_worker_handles(backend):
    from nsj_queue_lib.runtime.liveness import DatabaseLiveness

    ids = backend.enqueue(*[{"processo": p} for p in ["beta", "alpha", "beta", "alpha"]])
    store = backend.store
    store.set_handled_processos(frozenset({"alpha"}))
    session = backend.driver.session(store, DatabaseLiveness(store))
    if not session.groups:
        pytest.skip("no group commit on this backend")
    worker = backend.worker()
    claims = session.claim_group(worker, 10)
    assert sorted(c.task.id for c in claims) == [ids[1], ids[3]]
    store.rollback(worker)
