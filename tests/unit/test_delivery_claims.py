"""Which pub/sub deliveries a worker claims (nsj_queue_lib/flow/deliveries.py), as pure units
and on the in-memory double; the claims themselves: tests/integration/store/test_store_deliveries.py."""

from __future__ import annotations

import datetime

from nsj_queue_lib import DeadSubscriber, QueueClient, Subscriber, WorkerBase, WorkerPubSubBase
from nsj_queue_lib.db.mysql import deliveries as mysql_deliveries
from nsj_queue_lib.db.postgres import deliveries as postgres_deliveries
from nsj_queue_lib.flow.deliveries import json_array, postgres_array
from nsj_queue_lib.testing import InMemoryQueue
from nsj_queue_lib.worker_webhook import WorkerWebhook

START = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.timezone.utc)


class Plain(WorkerBase):
    def execute(self, payload, tarefa, bd_conn):
        return f"plain {tarefa['subscriber_id']}"


class OnlyA(WorkerPubSubBase):
    webhook_fallback = False

    @Subscriber("a")
    def handle_a(self, payload, subscription, tarefa, bd_conn):
        return "a handled"

    @DeadSubscriber("c")
    def dead_c(self, payload, subscription, tarefa, bd_conn):
        return "c buried"


class Mixed(WorkerPubSubBase):
    @Subscriber("a")
    def handle_a(self, payload, subscription, tarefa, bd_conn):
        return "a handled"


def test_what_each_kind_of_worker_claims():
    assert Plain.handled_subscribers() == frozenset()
    assert OnlyA.handled_subscribers() == frozenset({"a", "c"})
    # A webhook fallback may deliver any subscriber with a url: every delivery.
    assert Mixed.handled_subscribers() is None
    assert WorkerWebhook.handled_subscribers() is None


def test_the_handled_ids_are_data_quoted_for_each_database():
    assert postgres_array(None) is None
    assert postgres_array(frozenset()) == "{}"
    assert postgres_array(frozenset({'x"y\\z', "a"})) == '{"a","x\\"y\\\\z"}'
    assert json_array(frozenset({"b", "a"})) == '["a", "b"]'
    assert json_array(None) is None
    assert "ANY(h)" in postgres_deliveries.deliverable("q", "h")
    assert "JSON_CONTAINS(h, JSON_QUOTE(t.subscriber_id))" in mysql_deliveries.deliverable("t", "h")
    assert postgres_deliveries.deliverable("q", "h", "p").endswith(
        " AND (p IS NULL OR q.processo = ANY(p))"
    )


def test_the_in_memory_queue_leaves_unhandled_deliveries_pendente():
    queue = InMemoryQueue(now=START)
    for subscriber_id in ("a", "b"):
        queue.add_subscriber(subscriber_id, "evento")
    QueueClient(queue.connection(), "public.fila").insert_task_pub_sub(
        "o", "d", "evento", "p-1", {"n": 1}
    )
    queue.run(Plain())  # publishes, claims no delivery
    assert {t["subscriber_id"]: t["status"] for t in queue.tasks() if t["subscriber_id"]} == {
        "a": "pendente",
        "b": "pendente",
    }
    queue.run(OnlyA())
    deliveries = {t["subscriber_id"]: t for t in queue.tasks() if t["subscriber_id"]}
    assert deliveries["a"]["status"] == "sucesso"
    assert deliveries["a"]["mensagem"] == "a handled"
    assert deliveries["b"]["status"] == "pendente"
