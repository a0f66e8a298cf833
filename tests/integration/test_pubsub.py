"""Pub/sub on a real PostgreSQL with workers running in this process.

A publication (``insert_task_pub_sub``) is fanned out by the worker into one
delivery task per active matching subscriber; each delivery reaches the
method registered with ``@Subscriber`` for its subscriber, and after the
retries run out, the one registered with ``@DeadSubscriber``. What happened
is read from the queue table through a separate autocommit connection.
"""

from __future__ import annotations

import datetime
import json
import secrets
import time
from pathlib import Path
from typing import Any

import pytest

from nsj_queue_lib import DeadSubscriber, QueueClient, Subscriber, model
from nsj_queue_lib.pubsub import NO_SUBSCRIBERS_MESSAGE
from tests.helpers.databases import connect_pg, create_queue, drop_queue, insert_subscriber
from tests.helpers.http_server import RecordingServer
from tests.helpers.processes import clean_env, db_env, script_process, stop_script
from tests.helpers.worker_harness import (
    FanOutWorker,
    RecordingPubSubWorker,
    rows,
    running,
    wait_until,
    worker_settings,
)

pytestmark = pytest.mark.timeout(60)

PROCESSO = "pedido_criado"
PUBLICATION = {"pedido": 42, "itens": ["a", "b"], "texto": "ação"}


# -- harness --------------------------------------------------------------------


def add_subscriber(conn, queue, subscriber_id: str, processo: str = PROCESSO, **columns) -> None:
    """A subscriber row (columns: url, http_method, headers, ativo, tenant, grupo_empresarial)."""
    insert_subscriber(conn.execute, queue.subscriber_table, subscriber_id, processo, **columns)


def publish(
    queue,
    payload: Any = PUBLICATION,
    processo: str = PROCESSO,
    tenant: int | None = None,
    grupo_empresarial: str | None = None,
    chave_externa: str = "pedido-42",
    webhook: bool = False,
) -> int:
    """Commit one publication; returns its id."""
    conn = connect_pg(queue.dsn)
    try:
        client = QueueClient(conn, queue.table, queue.subscriber_table)
        insert = client.insert_task_webhook if webhook else client.insert_task_pub_sub
        task_id = insert(
            "vendas",
            "assinantes",
            processo,
            chave_externa,
            payload,
            tenant=tenant,
            grupo_empresarial=grupo_empresarial,
        )
        conn.commit()
        return task_id
    finally:
        conn.close()


def deliveries_of(conn, queue, publication_id: int) -> list[dict[str, Any]]:
    return rows(conn, queue.table, "publication_id = %s", (publication_id,))


def settled(conn, queue, where: str = "true", params: tuple = ()) -> bool:
    """No row matching ``where`` still has work ahead of it (and there is at least one)."""
    found = rows(conn, queue.table, where, params)
    return bool(found) and all(
        r["status"] in ("sucesso", "falha", "falha_processando") for r in found
    )


# -- fan-out ------------------------------------------------------------------------


def test_fan_out_reaches_exactly_the_matching_subscribers(pg_queue, pg_autocommit):
    db = pg_autocommit
    add_subscriber(db, pg_queue, "estoque", tenant=7)  # same tenant, any grupo
    add_subscriber(db, pg_queue, "financeiro", grupo_empresarial="G1")  # any tenant, same grupo
    add_subscriber(
        db, pg_queue, "todos"
    )  # tenant and grupo NULL: every publication of the processo
    add_subscriber(db, pg_queue, "inativo", tenant=7, ativo=False)
    add_subscriber(db, pg_queue, "outro_processo", processo="pedido_cancelado")
    add_subscriber(db, pg_queue, "outro_tenant", tenant=8)
    add_subscriber(db, pg_queue, "outro_grupo", grupo_empresarial="G2")
    publication_id = publish(pg_queue, tenant=7, grupo_empresarial="G1")
    publication_text = rows(db, pg_queue.table, "id = %s", (publication_id,))[0]["payload"]
    subscribers = {r["id"]: r for r in _subscriber_rows(db, pg_queue)}

    worker = FanOutWorker(worker_settings(pg_queue))
    with running(worker):
        wait_until(
            lambda: len(worker.calls.items) >= 3 and settled(db, pg_queue), what="3 deliveries"
        )
        time.sleep(0.2)  # a wrong extra delivery would show up here

    publication = rows(db, pg_queue.table, "id = %s", (publication_id,))[0]
    assert publication["status"] == "sucesso"
    for name in ("estoque", "financeiro", "todos"):
        assert name in publication["mensagem"]
    for name in ("inativo", "outro_processo", "outro_tenant", "outro_grupo"):
        assert name not in publication["mensagem"]

    deliveries = deliveries_of(db, pg_queue, publication_id)
    assert sorted(d["subscriber_id"] for d in deliveries) == ["estoque", "financeiro", "todos"]
    assert rows(db, pg_queue.table) == [publication, *deliveries]  # nothing else was enqueued
    for delivery in deliveries:
        assert delivery["status"] == "sucesso"
        assert delivery["tentativa"] == 1
        assert (
            delivery["data_hora"] == delivery["data_hora_inicial"]
        )  # a first attempt: one instant
        assert delivery["mensagem"] == f"{delivery['subscriber_id']} ok"
        assert delivery["dead"] is False
        for column in (
            "origem",
            "destino",
            "processo",
            "chave_externa",
            "tenant",
            "grupo_empresarial",
            "prioridade",
        ):
            assert delivery[column] == publication[column], column
        envelope = json.loads(delivery["payload"])
        assert set(envelope) == {"publication", "subscription"}
        assert envelope["publication"] == publication_text  # the stored text, not a re-encoding
        assert_subscription_is_the_row(
            envelope["subscription"], subscribers[delivery["subscriber_id"]]
        )

    assert worker.calls.handlers() == ["estoque", "financeiro", "todos"]  # each once, nothing else
    for handler in ("estoque", "financeiro", "todos"):
        (call,) = worker.calls.of(handler)
        delivery = next(d for d in deliveries if d["subscriber_id"] == handler)
        assert call["payload"] == json.loads(delivery["payload"])  # the whole envelope, as a dict
        assert call["subscription"] == call["payload"]["subscription"]
        assert call["subscription"]["id"] == handler
        assert call["tarefa"]["id"] == delivery["id"]
        assert call["tarefa"]["publication_id"] == publication_id
        assert call["tarefa"]["subscriber_id"] == handler
        assert call["in_transaction"] is True


def _subscriber_rows(conn, queue) -> list[dict[str, Any]]:
    """The rows as 1.2.2's envelope carries them: its columns, not the breaker's."""
    columns = ", ".join(model.SUBSCRIBER_COLUMNS)
    cur = conn.execute(f"SELECT {columns} FROM {queue.subscriber_table} ORDER BY id")
    names = [c.name for c in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def assert_subscription_is_the_row(subscription: dict[str, Any], row: dict[str, Any]) -> None:
    assert set(subscription) == set(row)
    for column, value in row.items():
        if isinstance(value, datetime.datetime):
            assert datetime.datetime.fromisoformat(subscription[column]) == value, column
        else:
            assert subscription[column] == value, column


def test_publication_without_subscribers_succeeds_and_says_so(pg_queue, pg_autocommit):
    db = pg_autocommit
    add_subscriber(db, pg_queue, "outro_processo", processo="pedido_cancelado")
    add_subscriber(db, pg_queue, "inativo", ativo=False)
    publication_id = publish(pg_queue)

    worker = FanOutWorker(worker_settings(pg_queue))
    with running(worker):
        wait_until(
            lambda: settled(db, pg_queue, "id = %s", (publication_id,)), what="the publication"
        )
        time.sleep(0.2)

    (publication,) = rows(db, pg_queue.table)  # no delivery rows at all
    assert publication["status"] == "sucesso"
    assert "no active subscriber" in publication["mensagem"].lower()
    assert publication["mensagem"] == NO_SUBSCRIBERS_MESSAGE
    assert worker.calls.items == []


def test_publication_without_subscriber_table_setting_fails_like_any_task(pg_queue, pg_autocommit):
    db = pg_autocommit
    add_subscriber(db, pg_queue, "estoque")
    publication_id = publish(pg_queue)

    worker = FanOutWorker(worker_settings(pg_queue, queue_subscriber_table=None, queue_max_retry=2))
    with running(worker):
        wait_until(lambda: settled(db, pg_queue, "dead"), what="the publication's dead letter")

    attempts = rows(db, pg_queue.table, "NOT dead")
    assert [a["tentativa"] for a in attempts] == [1, 2]
    assert [a["id_inicial"] for a in attempts] == [None, publication_id]
    for attempt in attempts:
        assert attempt["status"] == "falha"
        assert attempt["publication_id"] is None
        assert "QUEUE_SUBSCRIBER_TABLE" in attempt["mensagem"]
    assert attempts[-1]["estouro_tentativas"] is True
    (dead,) = rows(db, pg_queue.table, "dead")
    assert dead["live_id"] == publication_id
    assert dead["status"] == "sucesso"  # the default execute_dead
    assert rows(db, pg_queue.table, "publication_id IS NOT NULL") == []
    assert worker.calls.items == []


def test_publication_whose_subscriber_table_is_missing_fails_and_delivers_nothing(
    pg_queue, pg_autocommit
):
    db = pg_autocommit
    db.execute(f"DROP TABLE {pg_queue.subscriber_table}")
    publication_id = publish(pg_queue)

    worker = FanOutWorker(worker_settings(pg_queue, queue_max_retry=1))
    with running(worker):
        wait_until(lambda: settled(db, pg_queue, "dead"), what="the publication's dead letter")

    (attempt,) = rows(db, pg_queue.table, "NOT dead")
    assert attempt["id"] == publication_id
    assert attempt["status"] == "falha"
    assert pg_queue.name + "_subscriber" in attempt["mensagem"]  # the error names the missing table
    assert rows(db, pg_queue.table, "publication_id IS NOT NULL") == []
    assert worker.calls.items == []


def test_deliveries_are_inserted_in_the_transaction_that_marks_the_publication(
    pg_queue, pg_autocommit
):
    """The publication's commit fails (a deferred check refuses it): no delivery may survive."""
    db = pg_autocommit
    function = f"{pg_queue.name}_refuse_publication"
    db.execute(
        f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN RAISE EXCEPTION 'publication commit refused by the test'; END $$"
    )
    try:
        db.execute(
            f"CREATE CONSTRAINT TRIGGER refuse_publication AFTER UPDATE ON {pg_queue.table} "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
            "WHEN (NEW.status = 'sucesso' AND NEW.pub_sub AND NEW.publication_id IS NULL AND NOT NEW.dead) "
            f"EXECUTE FUNCTION {function}()"
        )
        add_subscriber(db, pg_queue, "estoque")
        add_subscriber(db, pg_queue, "todos")
        publication_id = publish(pg_queue)

        # No retry service: the settling statement releases the task's liveness lock before
        # its COMMIT (advisory unlocks are not transactional), so between the refused COMMIT
        # and the executor's failure record the task is 'processando' with no lock, and a
        # retry service running then rescues it ('falha_processando', "rescued an abandoned
        # attempt") instead of the failure this test reads.
        settings = worker_settings(pg_queue, queue_max_retry=2, queue_retry_thread_interval=3600)
        worker = FanOutWorker(settings)
        with running(worker):
            wait_until(lambda: settled(db, pg_queue, "dead"), what="the publication's dead letter")
            time.sleep(0.2)

        attempts = rows(db, pg_queue.table, "NOT dead")
        assert [a["tentativa"] for a in attempts] == [1, 2]
        assert attempts[0]["id"] == publication_id
        for attempt in attempts:
            assert attempt["status"] == "falha"
            assert "publication commit refused by the test" in attempt["mensagem"]
        assert rows(db, pg_queue.table, "publication_id IS NOT NULL") == []
        assert worker.calls.items == []
    finally:
        db.execute(f"DROP FUNCTION IF EXISTS {function}() CASCADE")


# -- registries, retries and the dead letter -------------------------------------------


class WorkerA(RecordingPubSubWorker):
    @Subscriber("a")
    def handle_a(self, payload, subscription, tarefa, bd_conn) -> str:
        return self.record("a", payload, subscription, tarefa, bd_conn)


class WorkerB(RecordingPubSubWorker):
    @Subscriber("b")
    def handle_b(self, payload, subscription, tarefa, bd_conn) -> str:
        return self.record("b", payload, subscription, tarefa, bd_conn)


def test_two_worker_classes_in_one_process_do_not_see_each_others_subscribers(
    pg_dsn, pg_admin, pg_queue, pg_autocommit
):
    db = pg_autocommit
    other = create_queue(pg_admin, pg_dsn)
    try:
        for queue in (pg_queue, other):
            add_subscriber(db, queue, "a")
            add_subscriber(db, queue, "b")
            publish(queue)
        worker_a = WorkerA(worker_settings(pg_queue, queue_max_retry=1))
        worker_b = WorkerB(worker_settings(other, queue_max_retry=1))
        with running(worker_a), running(worker_b):
            wait_until(
                lambda: settled(db, pg_queue, "dead") and settled(db, other, "dead"),
                what="both dead letters",
            )

        for queue, owner, handled, foreign, calls in (
            (pg_queue, "WorkerA", "a", "b", worker_a.calls),
            (other, "WorkerB", "b", "a", worker_b.calls),
        ):
            (ok,) = rows(db, queue.table, "subscriber_id = %s AND NOT dead", (handled,))
            assert ok["status"] == "sucesso"
            (refused,) = rows(db, queue.table, "subscriber_id = %s AND NOT dead", (foreign,))
            assert refused["status"] == "falha"
            assert f"'{foreign}'" in refused["mensagem"]
            assert owner in refused["mensagem"]
            assert "no url" in refused["mensagem"]
            assert [c["handler"] for c in calls.items] == [handled]
    finally:
        drop_queue(pg_admin, other)


class DeadLetterWorker(RecordingPubSubWorker):
    """No @Subscriber for "sem_metodo" (and the subscriber has no url): only a dead handler."""

    @Subscriber("sempre_falha")
    def always_fails(self, payload, subscription, tarefa, bd_conn) -> str:
        bd_conn.execute("SELECT 1")
        raise RuntimeError(f"falha simulada na tentativa {tarefa['tentativa']}")

    @DeadSubscriber("sem_metodo")
    @DeadSubscriber("sempre_falha")
    def gave_up(self, payload, subscription, tarefa, bd_conn) -> str:
        live_id = tarefa["live_id"]
        failed = bd_conn.execute(
            f"SELECT count(*) FROM {self._settings.queue_table} "
            "WHERE coalesce(id_inicial, id) = %s AND status = 'falha' AND NOT dead",
            (live_id,),
        ).fetchone()[0]
        self.calls.add(
            handler="dead",
            payload=payload,
            subscription=subscription,
            tarefa=dict(tarefa),
            failed_attempts_before=failed,
        )
        return f"dead {subscription['id']} after {failed} failures"


def test_delivery_without_method_or_url_is_retried_then_handled_by_the_dead_subscriber(
    pg_queue, pg_autocommit
):
    db = pg_autocommit
    add_subscriber(db, pg_queue, "sem_metodo")
    add_subscriber(db, pg_queue, "sempre_falha")
    publication_id = publish(pg_queue)
    publication_text = rows(db, pg_queue.table, "id = %s", (publication_id,))[0]["payload"]

    worker = DeadLetterWorker(worker_settings(pg_queue, queue_max_retry=3))
    with running(worker):
        wait_until(
            lambda: len(rows(db, pg_queue.table, "dead AND status = 'sucesso'")) == 2,
            what="two dead letters handled",
        )
        time.sleep(0.2)

    for subscriber_id, error in (
        (
            "sem_metodo",
            "subscriber 'sem_metodo' has no @Subscriber method in DeadLetterWorker and no url",
        ),
        ("sempre_falha", "RuntimeError: falha simulada na tentativa"),
    ):
        attempts = rows(db, pg_queue.table, "subscriber_id = %s AND NOT dead", (subscriber_id,))
        assert [a["tentativa"] for a in attempts] == [1, 2, 3]
        assert all(a["status"] == "falha" for a in attempts)
        assert all(error in a["mensagem"] for a in attempts), [a["mensagem"] for a in attempts]
        assert all(a["publication_id"] == publication_id for a in attempts)
        assert [a["estouro_tentativas"] for a in attempts] == [False, False, True]
        assert "maximum of 3 attempts" in attempts[-1]["mensagem"]
        first = attempts[0]

        (dead,) = rows(db, pg_queue.table, "subscriber_id = %s AND dead", (subscriber_id,))
        assert dead["live_id"] == first["id"]
        assert dead["publication_id"] == publication_id
        assert dead["status"] == "sucesso"
        assert dead["mensagem"] == f"dead {subscriber_id} after 3 failures"

        (call,) = [c for c in worker.calls.items if c["subscription"]["id"] == subscriber_id]
        assert call["failed_attempts_before"] == 3  # it ran after the retries ran out
        assert call["payload"] == json.loads(first["payload"])  # the delivery's envelope
        assert call["payload"]["publication"] == publication_text
        assert call["tarefa"]["dead"] is True
        assert call["tarefa"]["id"] == dead["id"]
    assert len(worker.calls.items) == 2


# -- the publication and the business change share one transaction -----------------------


@pytest.fixture
def business_table(pg_admin, pg_queue):
    name = f"public.{pg_queue.name}_pedido"
    pg_admin.execute(f"CREATE TABLE {name} (numero integer PRIMARY KEY, cliente text NOT NULL)")
    try:
        yield name
    finally:
        pg_admin.execute(f"DROP TABLE IF EXISTS {name}")


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2"])
@pytest.mark.parametrize("method", ["insert_task_pub_sub", "insert_task_webhook"])
def test_publication_commits_together_with_the_business_change(
    pg_queue, pg_autocommit, business_table, driver, method
):
    db = pg_autocommit
    add_subscriber(db, pg_queue, "estoque")
    add_subscriber(db, pg_queue, "todos")
    numero = secrets.randbelow(10**6)

    conn = connect_pg(pg_queue.dsn, driver)
    try:
        cur = conn.cursor()
        cur.execute(
            f"INSERT INTO {business_table} (numero, cliente) VALUES (%s, %s)", (numero, "ACME")
        )
        client = QueueClient(conn, pg_queue.table, pg_queue.subscriber_table)
        publication_id = getattr(client, method)(
            "vendas", "assinantes", PROCESSO, f"pedido-{numero}", {"pedido": numero}
        )
        assert rows(db, pg_queue.table) == []  # nothing visible before the commit
        conn.commit()
    finally:
        conn.close()

    worker = FanOutWorker(worker_settings(pg_queue))
    with running(worker):
        wait_until(
            lambda: len(worker.calls.items) >= 2 and settled(db, pg_queue), what="2 deliveries"
        )

    assert db.execute(
        f"SELECT cliente FROM {business_table} WHERE numero = %s", (numero,)
    ).fetchone() == ("ACME",)
    assert rows(db, pg_queue.table, "id = %s", (publication_id,))[0]["status"] == "sucesso"
    deliveries = deliveries_of(db, pg_queue, publication_id)
    assert sorted(d["subscriber_id"] for d in deliveries) == ["estoque", "todos"]
    assert all(d["status"] == "sucesso" for d in deliveries)
    for call in worker.calls.items:
        assert json.loads(call["payload"]["publication"]) == {"pedido": numero}


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2"])
def test_publication_rolled_back_with_the_business_change_is_never_delivered(
    pg_queue, pg_autocommit, business_table, driver
):
    db = pg_autocommit
    add_subscriber(db, pg_queue, "estoque")
    add_subscriber(db, pg_queue, "todos")

    conn = connect_pg(pg_queue.dsn, driver)
    try:
        cur = conn.cursor()
        cur.execute(f"INSERT INTO {business_table} (numero, cliente) VALUES (1, 'rolled back')")
        client = QueueClient(conn, pg_queue.table, pg_queue.subscriber_table)
        client.insert_task_pub_sub("vendas", "assinantes", PROCESSO, "rolled-back", {"pedido": 1})
        conn.rollback()
    finally:
        conn.close()
    assert rows(db, pg_queue.table) == []
    assert db.execute(f"SELECT count(*) FROM {business_table}").fetchone()[0] == 0

    worker = FanOutWorker(worker_settings(pg_queue))
    with running(worker):
        # A publication committed after the rollback is delivered: once it is, the
        # worker has looked at the queue, and the rolled-back one never showed up.
        sentinel_id = publish(pg_queue, {"pedido": 2}, chave_externa="sentinel")
        wait_until(
            lambda: len(worker.calls.items) >= 2 and settled(db, pg_queue), what="the sentinel"
        )
        time.sleep(0.2)

    everything = rows(db, pg_queue.table)
    assert {r["id"] for r in everything} == {sentinel_id} | {
        r["id"] for r in deliveries_of(db, pg_queue, sentinel_id)
    }
    assert all(r["chave_externa"] == "sentinel" for r in everything)
    assert len(everything) == 3
    assert all(json.loads(c["payload"]["publication"]) == {"pedido": 2} for c in worker.calls.items)


# -- the example ----------------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "worker_pub_sub_teste.py"


def test_the_pub_sub_example_serves_its_method_and_a_webhook_subscriber(pg_queue, pg_autocommit):
    db = pg_autocommit
    env = clean_env(
        **db_env(pg_queue.dsn),
        QUEUE_NAME=pg_queue.name,
        QUEUE_TABLE=pg_queue.table,
        QUEUE_SUBSCRIBER_TABLE=pg_queue.subscriber_table,
        QUEUE_MAX_RETRY="2",
        QUEUE_BASE_INTERVAL_RETRY="0.001",
        QUEUE_WAIT_NOTIFY_INTERVAL="0.5",
    )
    with RecordingServer() as server:
        add_subscriber(db, pg_queue, "teste", processo="teste")
        add_subscriber(
            db,
            pg_queue,
            "teste_webhook",
            processo="teste",
            url=server.url("/hook"),
            http_method="POST",
            headers={"Authorization": "Bearer exemplo"},
        )
        ok_id = publish(pg_queue, {"pedido": 1}, processo="teste", chave_externa="ok")
        failing_id = publish(
            pg_queue, {"pedido": 2, "falhar": True}, processo="teste", chave_externa="falha"
        )

        with script_process(EXAMPLE, env) as worker:

            def done() -> bool:
                assert worker.poll() is None, f"the example exited early:\n{worker.stdout.read()}"
                dead = rows(
                    db, pg_queue.table, "dead AND subscriber_id = 'teste' AND status = 'sucesso'"
                )
                hooks = rows(
                    db, pg_queue.table, "subscriber_id = 'teste_webhook' AND status = 'sucesso'"
                )
                return len(dead) == 1 and len(hooks) == 2 and settled(db, pg_queue)

            wait_until(done, 30, "the example's deliveries")
            stop_script(worker)
            output = worker.stdout.read()
        requests = server.snapshot()

    (ok,) = rows(db, pg_queue.table, "publication_id = %s AND subscriber_id = 'teste'", (ok_id,))
    assert ok["status"] == "sucesso"
    assert ok["mensagem"].startswith(f"assinante teste: publicação {ok_id} tratada")
    failed = rows(
        db,
        pg_queue.table,
        "publication_id = %s AND subscriber_id = 'teste' AND NOT dead",
        (failing_id,),
    )
    assert [(a["tentativa"], a["status"]) for a in failed] == [(1, "falha"), (2, "falha")]
    assert "FalhaSimulada" in failed[0]["mensagem"]
    (dead,) = rows(db, pg_queue.table, "dead AND subscriber_id = 'teste'")
    assert dead["mensagem"] == f"assinante teste: fila de mortos tratada (publicação {failing_id})"
    texts = {r["payload"] for r in rows(db, pg_queue.table, "id IN (%s, %s)", (ok_id, failing_id))}
    assert sorted(r.body.decode() for r in requests) == sorted(texts)
    assert all(
        r.method == "POST" and r.header("Authorization") == "Bearer exemplo" for r in requests
    )
    assert "Bearer exemplo" not in output  # header values never reach the logs
    assert "assinante teste" in output
