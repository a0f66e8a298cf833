"""Webhook delivery on a real PostgreSQL against a real HTTP server on 127.0.0.1.

``WorkerWebhook`` (and a ``WorkerPubSubBase`` with mixed subscribers) run in
this process; ``tests.helpers.http_server.RecordingServer`` records what
arrives. The queue table is read through a separate autocommit connection.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import pytest
from psycopg.types.json import Json

from nsj_queue_lib import (
    DeadSubscriber,
    QueueClient,
    Settings,
    Subscriber,
    WorkerPubSubBase,
    WorkerWebhook,
)
from nsj_queue_lib.model import MENSAGEM_LIMIT
from tests.helpers.databases import connect_pg
from tests.helpers.http_server import RecordingServer
from tests.helpers.worker_harness import rows, running, wait_until, worker_settings

pytestmark = pytest.mark.timeout(60)

PROCESSO = "nota_emitida"
PUBLICATION = {"nota": 123, "valor": "10.50", "cliente": "José"}
SECRET = "s3cr3t-Bearer-VALUE-9f8e7d"
HEADERS = {"Authorization": f"Bearer {SECRET}", "X-Tenant-Key": "k-" + SECRET[::-1]}
SECRET_VALUES = tuple(HEADERS.values())
QUERY_SECRET = "token=qs-secret-5a4b"


# -- harness (shared parts in tests/helpers/worker_harness.py) ---------------------


def add_subscriber(
    conn,
    queue,
    subscriber_id: str,
    url: str | None,
    http_method: str | None = "POST",
    headers: Any = None,
    processo: str = PROCESSO,
) -> None:
    conn.execute(
        f"INSERT INTO {queue.subscriber_table} (id, processo, url, http_method, headers) "
        "VALUES (%s, %s, %s, %s, %s)",
        (subscriber_id, processo, url, http_method, None if headers is None else Json(headers)),
    )


def publish(queue, payload: Any = PUBLICATION, chave_externa: str = "nota-123") -> int:
    conn = connect_pg(queue.dsn)
    try:
        client = QueueClient(conn, queue.table, queue.subscriber_table)
        task_id = client.insert_task_webhook("fiscal", "webhooks", PROCESSO, chave_externa, payload)
        conn.commit()
        return task_id
    finally:
        conn.close()


def publication_text(db, queue, publication_id: int) -> str:
    return rows(db, queue.table, "id = %s", (publication_id,))[0]["payload"]


def attempts(db, queue, subscriber_id: str) -> list[dict[str, Any]]:
    return rows(db, queue.table, "subscriber_id = %s AND NOT dead", (subscriber_id,))


def delivered(db, queue, subscriber_id: str) -> bool:
    return any(a["status"] == "sucesso" for a in attempts(db, queue, subscriber_id))


def dead_letter_settled(db, queue, subscriber_id: str) -> bool:
    return any(
        r["status"] == "sucesso"
        for r in rows(db, queue.table, "subscriber_id = %s AND dead", (subscriber_id,))
    )


def wait_settled(db, queue, what: str, delivered_to=(), dead_letters=()) -> None:
    """Until each of ``delivered_to`` got its delivery and each of ``dead_letters`` its dead
    letter handled."""
    wait_until(
        lambda: (
            all(delivered(db, queue, s) for s in delivered_to)
            and all(dead_letter_settled(db, queue, s) for s in dead_letters)
        ),
        what=what,
    )


@pytest.fixture
def server():
    with RecordingServer() as recording:
        yield recording


@pytest.fixture
def nsj_logs(caplog):
    """Every record of the ``nsj_queue_lib`` loggers, at every level.

    The worker's logging set-up stops propagation at ``nsj_queue_lib``, so
    caplog's handler is attached to that logger itself.
    """
    logger = logging.getLogger("nsj_queue_lib")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="nsj_queue_lib")
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


def all_log_text(caplog) -> str:
    parts = []
    for record in caplog.records:
        parts.append(record.getMessage())
        if record.exc_info:
            parts.append(logging.Formatter().formatException(record.exc_info))
        if record.exc_text:
            parts.append(record.exc_text)
    return "\n".join(parts)


# -- requests as they arrive ---------------------------------------------------------


@pytest.mark.parametrize("http_method", ["POST", "PUT"])
def test_post_and_put_send_the_publication_text_and_the_headers(
    pg_queue, pg_autocommit, server, nsj_logs, http_method
):
    db = pg_autocommit
    server.route("/hook", body=b'{"recebido": true}')
    add_subscriber(db, pg_queue, "erp", server.url(f"/hook?{QUERY_SECRET}"), http_method, HEADERS)
    publication_id = publish(pg_queue)
    text = publication_text(db, pg_queue, publication_id)

    with running(WorkerWebhook(worker_settings(pg_queue, log_debug=True))):
        wait_until(lambda: delivered(db, pg_queue, "erp"), what="the delivery")

    (request,) = server.snapshot()
    assert request.method == http_method
    assert request.path == f"/hook?{QUERY_SECRET}"  # the configured URL, query string included
    assert request.body == text.encode("utf-8")  # exactly the stored publication
    assert request.header("Content-Type") == "application/json"
    for name, value in HEADERS.items():
        assert request.header(name) == value

    (attempt,) = attempts(db, pg_queue, "erp")
    assert attempt["status"] == "sucesso"
    assert "200" in attempt["mensagem"]
    assert '{"recebido": true}' in attempt["mensagem"]  # the start of the answer's body
    assert "token" not in attempt["mensagem"] and QUERY_SECRET not in attempt["mensagem"]
    logs = all_log_text(nsj_logs)
    assert "erp" in logs  # the delivery was logged...
    for secret in SECRET_VALUES:  # ...but never a header value
        assert secret not in logs
        assert secret not in attempt["mensagem"]


@pytest.mark.parametrize("http_method", ["GET", "DELETE"])
def test_get_and_delete_send_no_body(pg_queue, pg_autocommit, server, http_method):
    db = pg_autocommit
    add_subscriber(db, pg_queue, "erp", server.url("/hook"), http_method, {"X-Api-Key": "abc"})
    publish(pg_queue)

    with running(WorkerWebhook(worker_settings(pg_queue))):
        wait_until(lambda: delivered(db, pg_queue, "erp"), what="the delivery")

    (request,) = server.snapshot()
    assert request.method == http_method
    assert request.body == b""
    assert request.header("Content-Length") in (None, "0")
    assert request.header("Transfer-Encoding") is None
    assert request.header("Content-Type") is None
    assert request.header("X-Api-Key") == "abc"


def test_text_publication_is_sent_as_text_and_a_configured_content_type_wins(
    pg_queue, pg_autocommit, server
):
    db = pg_autocommit
    add_subscriber(db, pg_queue, "texto", server.url("/texto"), "POST")
    add_subscriber(
        db, pg_queue, "xml", server.url("/xml"), "PUT", {"content-type": "application/xml"}
    )
    publication_id = publish(pg_queue, "<nota numero='1'>não é JSON</nota>")

    with running(WorkerWebhook(worker_settings(pg_queue))):
        wait_until(
            lambda: delivered(db, pg_queue, "texto") and delivered(db, pg_queue, "xml"),
            what="both deliveries",
        )

    body = publication_text(db, pg_queue, publication_id).encode("utf-8")
    (texto,) = server.requests_to("/texto")
    assert texto.body == body
    assert texto.header("Content-Type") == "text/plain; charset=utf-8"
    (xml,) = server.requests_to("/xml")
    assert xml.body == body
    assert xml.header("Content-Type") == "application/xml"
    assert [k for k, _ in xml.headers].count("content-type") + [k for k, _ in xml.headers].count(
        "Content-Type"
    ) == 1


# -- failures that are retried -------------------------------------------------------


def test_a_500_answer_is_a_failure_retried_until_it_succeeds(
    pg_queue, pg_autocommit, server, nsj_logs
):
    db = pg_autocommit
    server.route("/hook", statuses=[500, 200], body=b"erro interno do assinante")
    add_subscriber(db, pg_queue, "erp", server.url(f"/hook?{QUERY_SECRET}"), "POST", HEADERS)
    publication_id = publish(pg_queue)
    text = publication_text(db, pg_queue, publication_id)

    with running(WorkerWebhook(worker_settings(pg_queue))):
        wait_until(lambda: delivered(db, pg_queue, "erp"), what="the second attempt")

    first, second = attempts(db, pg_queue, "erp")
    assert (first["tentativa"], first["status"]) == (1, "falha")
    assert "500" in first["mensagem"]
    assert "erro interno do assinante" in first["mensagem"]
    assert first["reenfileirado"] is True
    assert (second["tentativa"], second["status"], second["id_inicial"]) == (
        2,
        "sucesso",
        first["id"],
    )
    assert "200" in second["mensagem"]
    requests = server.requests_to("/hook")
    assert len(requests) == 2
    assert all(r.body == text.encode("utf-8") for r in requests)  # the retry resends the same body
    assert all(r.header("Authorization") == HEADERS["Authorization"] for r in requests)
    logs = all_log_text(nsj_logs)
    for row in (first, second):
        assert QUERY_SECRET not in row["mensagem"]
        for secret in SECRET_VALUES:
            assert secret not in row["mensagem"]
    for secret in SECRET_VALUES:
        assert secret not in logs


def test_a_timeout_is_a_failure(pg_queue, pg_autocommit, server):
    db = pg_autocommit
    server.route("/slow", delays=[2.0, 0.0])  # the first answer comes long after the 0.5 s timeout
    add_subscriber(db, pg_queue, "lento", server.url("/slow"), "POST")
    publish(pg_queue)

    started = time.monotonic()
    with running(WorkerWebhook(worker_settings(pg_queue, default_webhook_timeout=0.5))):
        wait_until(
            lambda: len(attempts(db, pg_queue, "lento")) >= 2, what="the failed first attempt"
        )
        failed_after = time.monotonic() - started
        wait_until(lambda: delivered(db, pg_queue, "lento"), what="the retry")

    first, second = attempts(db, pg_queue, "lento")
    assert first["status"] == "falha"
    assert "timed out" in first["mensagem"]
    assert failed_after < 1.9  # it did not wait for the 2 s answer
    assert second["status"] == "sucesso"
    assert len(server.requests_to("/slow")) == 2


def test_a_redirect_is_not_followed_and_is_a_failure(pg_queue, pg_autocommit, server):
    db = pg_autocommit
    server.route("/moved", statuses=[302], headers={"Location": server.url("/target")})
    server.route("/permanent", statuses=[308], headers={"Location": server.url("/target")})
    add_subscriber(db, pg_queue, "movido", server.url("/moved"), "POST")
    add_subscriber(db, pg_queue, "permanente", server.url("/permanent"), "PUT")
    publish(pg_queue)

    with running(WorkerWebhook(worker_settings(pg_queue, queue_max_retry=1))):
        wait_settled(db, pg_queue, "both dead letters", dead_letters=["movido", "permanente"])

    for subscriber_id, status in (("movido", "302"), ("permanente", "308")):
        (attempt,) = attempts(db, pg_queue, subscriber_id)
        assert attempt["status"] == "falha"
        assert status in attempt["mensagem"]
    assert server.requests_to("/target") == []
    assert len(server.requests_to("/moved")) == 1
    assert len(server.requests_to("/permanent")) == 1


@pytest.mark.parametrize(
    "url, http_method, error",
    [
        ("file:///etc/passwd", "POST", "only http and https"),
        ("ftp://127.0.0.1:{port}/hook", "POST", "only http and https"),
        ("gopher://127.0.0.1:{port}/hook", "GET", "only http and https"),
        ("127.0.0.1:{port}/hook", "POST", "only http and https"),
        ("http://127.0.0.1:{port}/hook", "PATCH", "unsupported HTTP method"),
        ("http://127.0.0.1:{port}/hook", "TRACE", "unsupported HTTP method"),
        ("http://127.0.0.1:{port}/hook", "HEAD", "unsupported HTTP method"),
        (None, "POST", "no @Subscriber method in WorkerWebhook and no url"),
        ("   ", "POST", "has no url"),
    ],
)
def test_refused_subscriptions_fail_without_any_request(
    pg_queue, pg_autocommit, server, url, http_method, error
):
    db = pg_autocommit
    add_subscriber(db, pg_queue, "recusado", url and url.format(port=server.port), http_method)
    add_subscriber(
        db, pg_queue, "sentinela", server.url("/sentinel"), "POST"
    )  # proves the worker ran
    publish(pg_queue)

    with running(WorkerWebhook(worker_settings(pg_queue, queue_max_retry=2))):
        wait_settled(
            db,
            pg_queue,
            "the refused delivery's dead letter",
            delivered_to=["sentinela"],
            dead_letters=["recusado"],
        )

    refused = attempts(db, pg_queue, "recusado")
    if url is None:
        # No method and no url in this worker: another worker may handle it, so it is retried.
        assert [a["tentativa"] for a in refused] == [1, 2]
    else:
        # A subscription that can never be called: permanent, the dead letter follows at once.
        assert [a["tentativa"] for a in refused] == [1]
        assert "(permanent error: not retried)" in refused[0]["mensagem"]
    assert all(a["status"] == "falha" for a in refused)
    assert all(error in a["mensagem"] for a in refused), [a["mensagem"] for a in refused]
    assert [r.route for r in server.snapshot()] == ["/sentinel"]  # no request for the refused one


def test_a_huge_answer_is_read_only_up_to_the_bound(pg_queue, pg_autocommit, server):
    db = pg_autocommit
    size = 64 * 1024 * 1024
    ok = server.route("/big", body_size=size)
    failing = server.route("/big-error", statuses=[500], body_size=size)
    add_subscriber(db, pg_queue, "grande", server.url("/big"), "POST")
    add_subscriber(db, pg_queue, "grande_erro", server.url("/big-error"), "POST")
    publish(pg_queue)

    started = time.monotonic()
    with running(WorkerWebhook(worker_settings(pg_queue, queue_max_retry=1))):
        wait_settled(
            db, pg_queue, "both deliveries", delivered_to=["grande"], dead_letters=["grande_erro"]
        )
    assert time.monotonic() - started < 10

    (good,) = attempts(db, pg_queue, "grande")
    (bad,) = attempts(db, pg_queue, "grande_erro")
    assert good["status"] == "sucesso" and bad["status"] == "falha"
    for row in (good, bad):
        assert len(row["mensagem"]) <= MENSAGEM_LIMIT
        assert "xxxx" in row["mensagem"]  # the start of the body is kept
    # The worker stopped reading long before the end (the kernel buffers a few MiB at most).
    assert ok.bytes_sent < size // 2
    assert failing.bytes_sent < size // 2


def test_one_connection_is_reused_for_successive_deliveries(pg_queue, pg_autocommit, server):
    db = pg_autocommit
    add_subscriber(db, pg_queue, "erp", server.url("/hook"), "POST")
    with running(WorkerWebhook(worker_settings(pg_queue, queue_concurrency=1))):
        for n in range(3):
            publish(pg_queue, {"nota": n}, chave_externa=f"nota-{n}")
            server.wait_for_requests(n + 1)
        wait_until(
            lambda: (
                len([a for a in attempts(db, pg_queue, "erp") if a["status"] == "sucesso"]) == 3
            ),
            what="three deliveries",
        )

    requests = server.snapshot()
    assert [json.loads(r.body)["nota"] for r in requests] == [0, 1, 2]
    assert len({r.client_port for r in requests}) == 1  # one keep-alive connection (one session)


# -- one worker for method and webhook subscribers ---------------------------------------


class MixedWorker(WorkerPubSubBase):
    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.lock = threading.Lock()
        self.calls: list[tuple[str, dict]] = []

    @Subscriber("indice")
    def update_index(self, payload, subscription, tarefa, bd_conn) -> str:
        with self.lock:
            self.calls.append(("indice", payload))
        return "indice atualizado"

    @Subscriber("metodo_e_url")
    def method_wins(self, payload, subscription, tarefa, bd_conn) -> str:
        with self.lock:
            self.calls.append(("metodo_e_url", payload))
        return "tratado pelo método"

    @DeadSubscriber("quebrado")
    def broken_gave_up(self, payload, subscription, tarefa, bd_conn) -> str:
        with self.lock:
            self.calls.append(("dead quebrado", payload))
        return "webhook quebrado: avisado"


def test_a_pub_sub_worker_serves_method_and_webhook_subscribers(pg_queue, pg_autocommit, server):
    db = pg_autocommit
    server.route("/broken", statuses=[503])
    add_subscriber(db, pg_queue, "indice", None, None)
    add_subscriber(db, pg_queue, "metodo_e_url", server.url("/must-not-be-called"), "POST")
    add_subscriber(db, pg_queue, "hook", server.url("/hook"), "PUT", {"X-Api-Key": "abc"})
    add_subscriber(db, pg_queue, "quebrado", server.url("/broken"), "POST")
    publication_id = publish(pg_queue)
    text = publication_text(db, pg_queue, publication_id)

    worker = MixedWorker(worker_settings(pg_queue, queue_max_retry=2))
    with running(worker):
        wait_settled(
            db,
            pg_queue,
            "every delivery",
            delivered_to=["indice", "metodo_e_url", "hook"],
            dead_letters=["quebrado"],
        )

    (hook,) = server.requests_to("/hook")
    assert hook.method == "PUT" and hook.body == text.encode("utf-8")
    assert hook.header("X-Api-Key") == "abc"
    assert server.requests_to("/must-not-be-called") == []  # a registered method wins over the url
    assert len(server.requests_to("/broken")) == 2
    assert [a["status"] for a in attempts(db, pg_queue, "quebrado")] == ["falha", "falha"]
    assert all("503" in a["mensagem"] for a in attempts(db, pg_queue, "quebrado"))
    handled = sorted(name for name, _ in worker.calls)
    assert handled == ["dead quebrado", "indice", "metodo_e_url"]
    for _name, payload in worker.calls:
        assert payload["publication"] == text
    (dead,) = rows(db, pg_queue.table, "subscriber_id = 'quebrado' AND dead")
    assert dead["mensagem"] == "webhook quebrado: avisado"
