"""nsj_queue_lib.pubsub and the WorkerPubSubBase registries, without a database.

``publish`` is driven with a fake store; ``WorkerPubSubBase.execute`` and
``execute_dead`` are called directly with envelopes (no runtime, no database:
the handlers below never touch ``bd_conn``).
"""

from __future__ import annotations

import datetime
import json

import pytest

from nsj_queue_lib import (
    DeadSubscriber,
    PermanentError,
    Subscriber,
    WorkerPubSubBase,
    WorkerWebhook,
)
from nsj_queue_lib.payload import payload_hash
from nsj_queue_lib.pubsub import (
    NO_SUBSCRIBERS_MESSAGE,
    PubSubError,
    build_envelope,
    parse_envelope,
    publish,
)
from nsj_queue_lib.worker_base import WorkerBase

SUBSCRIBER = {
    "id": "estoque",
    "tenant": 7,
    "grupo_empresarial": None,
    "processo": "pedido_criado",
    "url": None,
    "http_method": None,
    "headers": None,
    "ativo": True,
    "created_at": datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.timezone.utc),
}


# -- build_envelope / parse_envelope --------------------------------------------------


def test_build_envelope_carries_the_publication_text_and_the_subscriber_row():
    envelope = build_envelope('{"pedido": 1}', SUBSCRIBER)
    assert envelope == {"publication": '{"pedido": 1}', "subscription": SUBSCRIBER}
    assert envelope["subscription"] is not SUBSCRIBER  # a copy: the row is not modified


def test_build_envelope_decodes_headers_stored_as_text():
    row = dict(SUBSCRIBER, headers='{"Authorization": "Bearer x"}')
    envelope = build_envelope("p", row)
    assert envelope["subscription"]["headers"] == {"Authorization": "Bearer x"}
    assert row["headers"] == '{"Authorization": "Bearer x"}'


def test_build_envelope_keeps_headers_that_are_not_json():
    assert (
        build_envelope("p", dict(SUBSCRIBER, headers="not json"))["subscription"]["headers"]
        == "not json"
    )


def test_build_envelope_keeps_a_null_publication():
    assert build_envelope(None, SUBSCRIBER)["publication"] is None


def test_an_envelope_survives_the_round_trip_through_its_stored_text():
    from nsj_queue_lib.payload import serialize_payload

    text = serialize_payload(build_envelope('{"pedido": 1}', SUBSCRIBER))
    parsed = parse_envelope(text)
    assert parsed["publication"] == '{"pedido": 1}'
    assert parsed["subscription"]["id"] == "estoque"
    assert parsed["subscription"]["created_at"] == "2024-05-01T12:30:00+00:00"


@pytest.mark.parametrize(
    "payload",
    [
        '{"publication": "x", "subscription": {"id": "a"}}',
        '{"publication": null, "subscription": {"id": "a", "url": null}}',
        {"publication": "x", "subscription": {"id": "a"}},
    ],
)
def test_parse_envelope_accepts_envelopes(payload):
    envelope = parse_envelope(payload)
    assert envelope["subscription"]["id"] == "a"


@pytest.mark.parametrize(
    "payload",
    [
        None,
        "",
        "not json",
        "[1, 2]",
        '"text"',
        "{}",
        '{"publication": "x"}',
        '{"subscription": {"id": "a"}}',
        '{"publication": "x", "subscription": "a"}',
        '{"publication": "x", "subscription": {"url": "http://x"}}',
        {"publication": "x", "subscription": []},
    ],
)
def test_parse_envelope_returns_none_for_anything_else(payload):
    assert parse_envelope(payload) is None


# -- publish (fan-out) with a fake store --------------------------------------------------


class FakeStore:
    def __init__(self, subscribers, subscriber_table="public.fila_subscriber"):
        self.subscriber_table = subscriber_table
        self.queue_table = "public.fila"
        self.subscribers = subscribers
        self.listed = []
        self.inserted = []

    def list_subscribers(self, conn, processo, tenant, grupo_empresarial):
        self.listed.append((processo, tenant, grupo_empresarial))
        return self.subscribers

    def insert_deliveries(self, conn, publication, deliveries):
        self.inserted.append((publication, list(deliveries)))
        return list(range(100, 100 + len(deliveries)))


PUBLICATION_TASK = {
    "id": 9,
    "processo": "pedido_criado",
    "tenant": 7,
    "grupo_empresarial": "G1",
    "payload": '{"pedido": 1}',
}


def test_publish_inserts_one_delivery_per_subscriber_with_its_envelope_and_hash():
    other = dict(SUBSCRIBER, id="financeiro", tenant=None)
    store = FakeStore([SUBSCRIBER, other])
    message = publish(store, object(), PUBLICATION_TASK)

    assert store.listed == [("pedido_criado", 7, "G1")]
    ((publication, deliveries),) = store.inserted
    # The publication, with the trace context its deliveries carry (none here).
    assert publication == {**PUBLICATION_TASK, "trace_context": None}
    assert [d[0] for d in deliveries] == ["estoque", "financeiro"]
    for (_subscriber_id, text, digest), row in zip(deliveries, [SUBSCRIBER, other], strict=True):
        envelope = json.loads(text)
        assert envelope["publication"] == '{"pedido": 1}'
        assert envelope["subscription"]["id"] == row["id"]
        assert digest == payload_hash(text)
    assert message == "Published to 2 subscriber(s): estoque, financeiro"


def test_publish_without_subscribers_inserts_nothing():
    store = FakeStore([])
    assert publish(store, object(), PUBLICATION_TASK) == NO_SUBSCRIBERS_MESSAGE
    assert store.inserted == []


def test_publish_without_a_subscriber_table_fails_before_any_query():
    store = FakeStore([SUBSCRIBER], subscriber_table=None)
    with pytest.raises(PubSubError, match="QUEUE_SUBSCRIBER_TABLE"):
        publish(store, object(), PUBLICATION_TASK)
    assert store.listed == [] and store.inserted == []


def test_publish_message_fits_the_mensagem_column():
    subscribers = [dict(SUBSCRIBER, id=f"assinante_{n:03d}_" + "x" * 80) for n in range(20)]
    message = publish(FakeStore(subscribers), object(), PUBLICATION_TASK)
    assert len(message) <= 500
    assert message.startswith("Published to 20 subscriber(s): assinante_000_")
    assert message.endswith("...")


# -- registries -------------------------------------------------------------------------


class Alpha(WorkerPubSubBase):
    @Subscriber("a")
    def handle_a(self, payload, subscription, tarefa, bd_conn):
        return f"alpha a {tarefa['id']}"

    @DeadSubscriber("a")
    def dead_a(self, payload, subscription, tarefa, bd_conn):
        return "alpha dead a"


class Beta(WorkerPubSubBase):
    @Subscriber("b")
    @Subscriber("b2")
    def handle_b(self, payload, subscription, tarefa, bd_conn):
        return f"beta {subscription['id']}"


class AlphaChild(Alpha):
    @Subscriber("c")
    def handle_c(self, payload, subscription, tarefa, bd_conn):
        return "child c"


class AlphaOverride(Alpha):
    @Subscriber("a")
    def other_a(self, payload, subscription, tarefa, bd_conn):
        return "override a"


def delivery(subscriber_id, url=None, publication='{"pedido": 1}'):
    return json.dumps(
        {"publication": publication, "subscription": {"id": subscriber_id, "url": url}}
    )


TAREFA = {"id": 5, "dead": False}


def test_each_class_sees_only_its_own_subscribers():
    assert Alpha._subscriber_methods == {"a": "handle_a"}
    assert Alpha._dead_subscriber_methods == {"a": "dead_a"}
    assert Beta._subscriber_methods == {"b": "handle_b", "b2": "handle_b"}
    assert Beta._dead_subscriber_methods == {}
    assert WorkerPubSubBase._subscriber_methods == {}
    assert WorkerWebhook._subscriber_methods == {}


def test_a_subclass_inherits_and_extends_the_registry():
    assert AlphaChild._subscriber_methods == {"a": "handle_a", "c": "handle_c"}
    assert AlphaChild._dead_subscriber_methods == {"a": "dead_a"}
    assert Alpha._subscriber_methods == {"a": "handle_a"}  # the parent is unchanged
    assert AlphaChild(None).execute(delivery("a"), TAREFA, None) == "alpha a 5"


def test_a_subclass_can_override_a_subscriber():
    assert AlphaOverride(None).execute(delivery("a"), TAREFA, None) == "override a"
    assert Alpha(None).execute(delivery("a"), TAREFA, None) == "alpha a 5"


def test_execute_routes_by_subscriber_id_with_the_whole_envelope():
    seen = {}

    class Spy(WorkerPubSubBase):
        @Subscriber("s")
        def handle(self, payload, subscription, tarefa, bd_conn):
            seen.update(payload=payload, subscription=subscription, tarefa=tarefa, bd_conn=bd_conn)
            return "ok"

    conn = object()
    assert Spy(None).execute(delivery("s"), TAREFA, conn) == "ok"
    assert seen["payload"] == {
        "publication": '{"pedido": 1}',
        "subscription": {"id": "s", "url": None},
    }
    assert seen["subscription"] is seen["payload"]["subscription"]
    assert seen["tarefa"] is TAREFA and seen["bd_conn"] is conn


def test_another_class_subscriber_without_url_fails_clearly():
    with pytest.raises(PubSubError) as info:
        Alpha(None).execute(delivery("b"), TAREFA, None)
    assert str(info.value) == "subscriber 'b' has no @Subscriber method in Alpha and no url"


def test_a_payload_that_is_not_an_envelope_fails_permanently():
    # No @Task method took it and it is no delivery: no retry can help.
    with pytest.raises(PermanentError, match="task 5 is not a pub/sub delivery") as info:
        Alpha(None).execute('{"pedido": 1}', TAREFA, None)
    assert "processos it handles: none" in str(info.value)


def test_a_numeric_subscriber_id_finds_its_method():
    class Numeric(WorkerPubSubBase):
        @Subscriber("42")
        def handle(self, payload, subscription, tarefa, bd_conn):
            return "numeric"

    envelope = json.dumps({"publication": "p", "subscription": {"id": 42}})
    assert Numeric(None).execute(envelope, TAREFA, None) == "numeric"


def test_execute_dead_uses_the_dead_subscriber_or_falls_back_to_the_default():
    dead = {"id": 8, "dead": True, "live_id": 3}
    assert Alpha(None).execute_dead(delivery("a"), dead, None) == "alpha dead a"
    default = WorkerBase.execute_dead(Alpha(None), delivery("b"), dead, None)
    assert Alpha(None).execute_dead(delivery("b"), dead, None) == default  # no dead handler for b
    assert Alpha(None).execute_dead('{"pedido": 1}', dead, None) == default  # a dead publication
    assert "3" in default


@pytest.mark.parametrize("bad", ["", None, 7])
def test_decorators_need_a_subscriber_id(bad):
    with pytest.raises(ValueError):
        Subscriber(bad)
    with pytest.raises(ValueError):
        DeadSubscriber(bad)


def test_handle_task_sends_publications_to_publish_and_deliveries_to_execute():
    calls = []

    class Probe(Alpha):
        def publish(self, tarefa, bd_conn):
            calls.append("publish")
            return "published"

    worker = Probe(None)
    assert (
        worker.handle_task(
            {"id": 1, "pub_sub": True, "publication_id": None, "dead": False, "payload": "{}"}, None
        )
        == "published"
    )
    assert (
        worker.handle_task(
            {
                "id": 2,
                "pub_sub": False,
                "publication_id": 1,
                "dead": False,
                "payload": delivery("a"),
            },
            None,
        )
        == "alpha a 2"
    )
    assert (
        worker.handle_task(
            {
                "id": 3,
                "pub_sub": False,
                "publication_id": 1,
                "dead": True,
                "payload": delivery("a"),
                "live_id": 2,
            },
            None,
        )
        == "alpha dead a"
    )
    assert calls == ["publish"]
