"""QueueClient and the client operations of every store, through every kind of caller connection.

The connection under test (``conn``) is never autocommit: the client must
enqueue inside the caller's transaction. What is really stored is read by
the backend's admin connection, which sees only committed rows.
"""

from __future__ import annotations

import datetime
import hashlib
import json

import pytest

from nsj_queue_lib import QueueClient
from nsj_queue_lib.db.driver import client_store
from nsj_queue_lib.db.mysql.store import MysqlQueueStore
from nsj_queue_lib.db.postgres.store import COPY_THRESHOLD, PostgresQueueStore
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.payload import payload_hash, serialize_payload
from tests.integration.store.backends import CLIENT_PATHS, TASK, UTC, execute, fetch, on

pytestmark = on(*CLIENT_PATHS)


# -- transactions ---------------------------------------------------------------


def test_rolled_back_enqueue_leaves_nothing(backend, client, conn):
    task_id = client.insert_task(**TASK)
    assert isinstance(task_id, int)
    assert backend.in_transaction(conn)
    conn.rollback()
    assert backend.count() == 0
    assert backend.row(task_id) is None


def test_client_never_commits(backend, client, conn):
    task_id = client.insert_task(**TASK)
    client.insert_tasks([TASK, TASK])
    client.list_equivalent_task(**TASK)
    assert backend.in_transaction(conn)
    assert backend.count() == 0  # invisible until the caller commits
    conn.commit()
    assert backend.count() == 3
    assert backend.row(task_id)["chave_externa"] == "pedido-1"


def test_committed_enqueue_has_the_contract_defaults(backend, client, conn):
    before = backend.now()
    task_id = client.insert_task(**TASK)
    conn.commit()
    after = backend.now()
    row = backend.row(task_id)
    assert row["id"] == task_id
    assert [row[c] for c in ("origem", "destino", "processo", "chave_externa", "payload")] == [
        "erp",
        "fiscal",
        "emitir_nota",
        "pedido-1",
        "texto",
    ]
    assert (row["status"], row["tentativa"], row["prioridade"]) == ("pendente", 1, 50)
    flags = ("pub_sub", "dead", "reenfileirado", "estouro_tentativas")
    assert [row[c] for c in flags] == [False] * 4
    assert before <= row["data_hora"] <= after
    assert row["data_hora_inicial"] == row["data_hora"]  # the same instant, to the microsecond
    assert row["payload_hash"] == hashlib.sha256(b"texto").hexdigest().encode("ascii")
    empty = ("tenant", "grupo_empresarial", "mensagem", "proxima_tentativa", "live_id")
    assert [row[c] for c in empty + ("publication_id", "subscriber_id")] == [None] * 7


def test_times_keep_microseconds(backend, client, conn):
    ids = [client.insert_task(**TASK) for _ in range(5)]
    conn.commit()
    stamps = [backend.row(i)["data_hora"] for i in ids]
    assert any(s.microsecond for s in stamps)
    assert stamps == sorted(stamps)


def test_each_insert_returns_its_own_id(backend, client, conn):
    ids = [client.insert_task(**dict(TASK, chave_externa=str(n))) for n in range(3)]
    conn.commit()
    assert len(set(ids)) == 3
    assert [backend.row(i)["chave_externa"] for i in ids] == ["0", "1", "2"]


def test_explicit_fields_are_stored(backend, client, conn):
    when = datetime.datetime(2031, 2, 3, 4, 5, 6, 789, tzinfo=UTC)
    task_id = client.insert_task(
        **TASK, tenant=47, grupo_empresarial="grupo", data_hora=when, prioridade=0
    )
    big = client.insert_task(**TASK, tenant=2**40, prioridade=2**31 - 1)
    conn.commit()
    row = backend.row(task_id)
    assert (row["tenant"], row["grupo_empresarial"], row["prioridade"]) == (47, "grupo", 0)
    assert row["data_hora"] == when and row["data_hora_inicial"] == when
    row = backend.row(big)
    assert (row["tenant"], row["prioridade"]) == (2**40, 2**31 - 1)


@pytest.mark.parametrize("method", ["insert_task_pub_sub", "insert_task_webhook"])
def test_publications_set_pub_sub(backend, client, conn, method):
    task_id = getattr(client, method)(**TASK, tenant=1, grupo_empresarial="g", prioridade=70)
    conn.commit()
    row = backend.row(task_id)
    assert row["pub_sub"] is True
    assert (row["status"], row["tenant"], row["grupo_empresarial"], row["prioridade"]) == (
        "pendente",
        1,
        "g",
        70,
    )


# -- payloads ------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        {"b": 1, "a": {"d": [1, 2, {"z": None, "y": True}], "c": "ação"}},
        [{"k": 2, "j": 1}, "x", 1.5],
        {"emoji": "🎉", "quote": 'it\'s "quoted" \\ back'},
        {},
        [],
    ],
    ids=["dict", "list", "emoji-and-quotes", "empty-dict", "empty-list"],
)
def test_json_payloads_round_trip_as_sorted_text(backend, client, conn, payload):
    """The text and its hash are the same on every database (the hash is the text's sha256)."""
    task_id = client.insert_task(**dict(TASK, payload=payload))
    conn.commit()
    row = backend.row(task_id)
    assert json.loads(row["payload"]) == payload
    assert row["payload"] == json.dumps(
        payload, sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    assert row["payload_hash"] == hashlib.sha256(row["payload"].encode()).hexdigest().encode()
    assert row["payload_hash"] == payload_hash(serialize_payload(payload))


def test_large_payload_round_trips(backend, client, conn):
    text = "x" * 300_000  # more than a MySQL TEXT column (64 KiB) holds
    task_id = client.insert_task(**dict(TASK, payload=text))
    conn.commit()
    assert backend.row(task_id)["payload"] == text


def test_equal_dicts_store_the_same_text_and_hash(backend, client, conn):
    first = client.insert_task(**dict(TASK, payload={"x": 1, "y": [1, 2]}))
    second = client.insert_task(**dict(TASK, payload={"y": [1, 2], "x": 1}))
    conn.commit()
    a, b = backend.row(first), backend.row(second)
    assert (a["payload"], a["payload_hash"]) == (b["payload"], b["payload_hash"])


@pytest.mark.parametrize("payload", [None, ""])
def test_no_payload_no_hash(backend, client, conn, payload):
    task_id = client.insert_task(**dict(TASK, payload=payload))
    conn.commit()
    row = backend.row(task_id)
    assert row["payload"] == payload
    assert row["payload_hash"] is None


# -- insert_tasks --------------------------------------------------------------


def test_insert_tasks_10000_in_one_call(backend, client, conn):
    count = 500 if backend.kind == "singlestore" else 10_000  # one statement per row there
    tasks = [
        dict(TASK, chave_externa=str(n), payload={"n": n}, prioridade=n % 100, tenant=n % 7 or None)
        for n in range(count)
    ]
    ids = client.insert_tasks(tasks)
    assert backend.in_transaction(conn)
    conn.commit()
    assert len(ids) == count and len(set(ids)) == count
    assert all(isinstance(i, int) for i in ids)
    rows = {row["id"]: row for row in backend.rows()}
    assert len(rows) == count
    for n, task_id in enumerate(ids):
        row = rows[task_id]
        assert (
            row["chave_externa"],
            row["payload"],
            row["prioridade"],
            row["tenant"],
            row["status"],
            row["pub_sub"],
        ) == (str(n), f'{{"n":{n}}}', n % 100, n % 7 or None, "pendente", False), n


def test_insert_tasks_fills_what_insert_task_fills(backend, client, conn):
    when = datetime.datetime(2030, 1, 1, tzinfo=UTC)
    single = client.insert_task(**TASK)
    plain, full, pub = client.insert_tasks(
        [
            TASK,
            dict(
                TASK, tenant=3, grupo_empresarial="g", data_hora=when, prioridade=7, payload=["a"]
            ),
            dict(TASK, pub_sub=True),
        ]
    )
    conn.commit()
    reference, row = backend.row(single), backend.row(plain)
    for column in (
        "status",
        "tentativa",
        "prioridade",
        "pub_sub",
        "dead",
        "reenfileirado",
        "estouro_tentativas",
        "payload",
        "payload_hash",
        "tenant",
        "grupo_empresarial",
    ):
        assert row[column] == reference[column], column
    assert row["data_hora_inicial"] == row["data_hora"]
    row = backend.row(full)
    assert (
        row["tenant"],
        row["grupo_empresarial"],
        row["data_hora"],
        row["data_hora_inicial"],
        row["prioridade"],
        row["payload"],
    ) == (3, "g", when, when, 7, '["a"]')
    assert row["payload_hash"] == payload_hash('["a"]')
    assert backend.row(pub)["pub_sub"] is True


def test_insert_tasks_empty_sends_nothing(backend, client, conn):
    marker = backend.sent_marker(conn)
    assert client.insert_tasks([]) == []
    assert not backend.sent_since(conn, marker)


def test_a_bad_item_in_a_small_insert_tasks_sends_nothing(backend, client, conn):
    tasks = [dict(TASK, chave_externa=str(n)) for n in range(COPY_THRESHOLD - 2)]
    tasks.append(dict(TASK, prioridade=-1))
    marker = backend.sent_marker(conn)
    with pytest.raises(ValueError, match=f"#{COPY_THRESHOLD - 2}"):
        client.insert_tasks(tasks)
    assert not backend.sent_since(conn, marker)
    conn.commit()
    assert backend.count() == 0


def test_a_bad_item_in_a_big_insert_tasks_writes_nothing_and_the_transaction_goes_on(
    backend, client, conn
):
    # From COPY_THRESHOLD tasks on psycopg 3 the items are checked while the earlier
    # ones stream: the store rolls its COPY back to a savepoint.
    before = client.insert_task(**TASK)
    tasks = [dict(TASK, chave_externa=str(n)) for n in range(COPY_THRESHOLD + 50)]
    tasks.append(dict(TASK, prioridade=-1))
    with pytest.raises(ValueError, match=f"#{COPY_THRESHOLD + 50}"):
        client.insert_tasks(tasks)
    after = client.insert_tasks(tasks[:-1])
    conn.commit()
    assert backend.count() == 1 + len(after)
    assert backend.row(before) is not None and min(after) > before


MALFORMED_ITEMS = [
    {"origem": "x"},  # missing fields
    dict(TASK, unknown_field=1),
    dict(TASK, pub_sub="yes"),
    "not a mapping",
]


def test_malformed_items_in_insert_tasks_send_nothing(backend, client, conn):
    marker = backend.sent_marker(conn)
    for bad in MALFORMED_ITEMS:
        with pytest.raises((ValueError, TypeError)):
            client.insert_tasks([TASK, bad])
    assert not backend.sent_since(conn, marker)


# -- refused table names and arguments -----------------------------------------

MALICIOUS_TABLES = [
    'public."fila"',
    'test."fila"',
    "test.`fila`",
    "fila'",
    "fila; drop table x",
    "fila;",
    "fila teste",
    " fila",
    "a.b.c",
    "",
    "fila--",
    "fila#",
    "1fila",
    "fila\n",
    "fila/*",
]


def test_malicious_table_names_are_refused_before_any_sql(backend, conn):
    marker = backend.sent_marker(conn)
    for name in MALICIOUS_TABLES:
        with pytest.raises(ValueError):
            QueueClient(conn, name, backend.subscriber_table)
        with pytest.raises(ValueError):
            QueueClient(conn, backend.table, name)
    assert not backend.sent_since(conn, marker)
    assert backend.table_exists()


def test_injection_attempt_leaves_the_queue_intact(backend, conn):
    with pytest.raises(ValueError):
        QueueClient(conn, f"{backend.table}; DROP TABLE {backend.table}; --")
    conn.commit()
    assert backend.table_exists()


BAD_ARGUMENTS = [
    ("empty processo", dict(processo="")),
    ("blank processo", dict(processo="   ")),
    ("None processo", dict(processo=None)),
    ("negative prioridade", dict(prioridade=-1)),
    ("huge prioridade", dict(prioridade=2**31)),
    ("float prioridade", dict(prioridade=1.5)),
    ("bool prioridade", dict(prioridade=True)),
    ("bool tenant", dict(tenant=True)),
    ("str tenant", dict(tenant="1")),
    ("str data_hora", dict(data_hora="2024-01-01 00:00:00")),
    ("date data_hora", dict(data_hora=datetime.date(2024, 1, 1))),
    ("timestamp data_hora", dict(data_hora=1700000000)),
    ("int payload", dict(payload=42)),
    ("bytes payload", dict(payload=b"raw")),
    ("set payload", dict(payload={1, 2})),
    ("unserializable payload", dict(payload={"x": object()})),
    ("long chave_externa", dict(chave_externa="k" * 101)),
    ("long origem", dict(origem="o" * 151)),
    ("long processo", dict(processo="p" * 251)),
    ("long grupo_empresarial", dict(grupo_empresarial="g" * 41)),
    ("int chave_externa", dict(chave_externa=123)),
]


def test_bad_arguments_raise_value_error_and_send_nothing(backend, client, conn):
    for case, changes in BAD_ARGUMENTS:
        marker = backend.sent_marker(conn)
        for method in ("insert_task", "insert_task_pub_sub", "insert_task_webhook"):
            with pytest.raises(ValueError):
                getattr(client, method)(**dict(TASK, **changes))
        with pytest.raises(ValueError):
            client.insert_tasks([dict(TASK, **changes)])
        assert not backend.sent_since(conn, marker), case
    conn.commit()
    assert backend.count() == 0


def test_limits_are_inclusive(backend, client, conn):
    task_id = client.insert_task(
        origem="o" * 150,
        destino="d" * 150,
        processo="p" * 250,
        chave_externa="k" * 100,
        payload="x",
        grupo_empresarial="g" * 40,
    )
    conn.commit()
    assert backend.row(task_id)["chave_externa"] == "k" * 100


def test_bad_arguments_inside_an_open_transaction_keep_it_usable(backend, client, conn):
    first = client.insert_task(**TASK)
    with pytest.raises(ValueError):
        client.insert_task(**dict(TASK, prioridade=-5))
    assert backend.in_transaction(conn)  # not aborted: the bad call sent nothing
    second = client.insert_task(**TASK)
    conn.commit()
    assert set(backend.statuses()) == {first, second}


def test_driver_errors_become_database_error(backend, conn):
    missing = backend.client(conn, f"{backend.table}_missing")
    with pytest.raises(DatabaseError) as info:
        missing.insert_task(**TASK)
    assert type(info.value.__cause__).__module__.split(".")[0] in ("psycopg", "psycopg2", "pymysql")


def test_the_connection_chooses_the_store(backend, conn):
    expected = PostgresQueueStore if backend.dialect == "postgres" else MysqlQueueStore
    assert type(client_store(conn, backend.table, None)) is expected
    with pytest.raises(TypeError, match="unsupported connection"):
        QueueClient(object(), backend.table)


def test_a_queue_in_another_schema(backend, conn):
    """``schema.table``: on MySQL the schema is a database, whichever the connection uses."""
    with backend.other_namespace() as queue:
        task_id = backend.client(conn, queue.table).insert_task(**TASK)
        conn.commit()
        assert fetch(backend.admin, f"SELECT status FROM {queue.table} WHERE id = %s", (task_id,))
        assert backend.count() == 0


# -- list_equivalent_task ------------------------------------------------------


def test_list_equivalent_task_filters(backend, client, conn):
    base = dict(TASK, payload={"pedido": 1, "itens": [1, 2]}, tenant=10, grupo_empresarial="g1")
    match = client.insert_task(**base)
    other = {
        "tenant": client.insert_task(**dict(base, tenant=11)),
        "no tenant": client.insert_task(**dict(base, tenant=None)),
        "group": client.insert_task(**dict(base, grupo_empresarial="g2")),
        "payload": client.insert_task(**dict(base, payload={"pedido": 2, "itens": [1, 2]})),
        "key": client.insert_task(**dict(base, chave_externa="pedido-2")),
        "case": client.insert_task(**dict(base, chave_externa="PEDIDO-1")),
        "origin": client.insert_task(**dict(base, origem="crm")),
        "process": client.insert_task(**dict(base, processo="cancelar_nota")),
    }
    failed, scheduled, done = (client.insert_task(**base) for _ in range(3))
    conn.commit()
    backend.set_status("falha", failed)
    backend.set_status("agendada", scheduled)
    backend.set_status("sucesso", done)

    query = dict(base, payload={"itens": [1, 2], "pedido": 1})  # the same dict, another order

    def ids(**changes):
        return sorted(r["id"] for r in client.list_equivalent_task(**dict(query, **changes)))

    found = client.list_equivalent_task(**query)
    assert sorted(r["id"] for r in found) == sorted([match, scheduled, done])
    first = next(r for r in found if r["id"] == match)
    assert first["payload"] == serialize_payload(base["payload"])
    assert first["status"] == "pendente"
    assert first["pub_sub"] is False and first["dead"] is False  # booleans on every database
    assert isinstance(first["payload_hash"], bytes)  # also from psycopg2's bytea

    assert ids(status=["falha"]) == ids(status="falha") == [failed]
    assert ids(status=("pendente",)) == [match]
    assert ids(tenant=11) == [other["tenant"]]
    assert ids(tenant=None) == [other["no tenant"]]
    assert ids(grupo_empresarial="g2") == [other["group"]]
    assert ids(grupo_empresarial="g3") == []
    assert ids(payload={"pedido": 2, "itens": [1, 2]}) == [other["payload"]]
    assert ids(chave_externa="pedido-2") == [other["key"]]
    assert ids(chave_externa="PEDIDO-1") == [other["case"]]  # byte for byte, on every database
    assert ids(origem="crm") == [other["origin"]]
    assert ids(processo="cancelar_nota") == [other["process"]]
    assert ids(destino="outro") == []


def test_list_equivalent_task_sees_the_callers_uncommitted_rows(client):
    text_id = client.insert_task(**dict(TASK, payload="conteúdo da mensagem"))
    empty_id = client.insert_task(**dict(TASK, payload=None))
    found = client.list_equivalent_task(**dict(TASK, payload="conteúdo da mensagem"))
    assert [r["id"] for r in found] == [text_id]
    assert [r["id"] for r in client.list_equivalent_task(**dict(TASK, payload=None))] == [empty_id]


def test_list_equivalent_task_refuses_unknown_statuses(backend, client, conn):
    marker = backend.sent_marker(conn)
    for status in ([], ["feito"], ("pendente", "nope")):
        with pytest.raises(ValueError):
            client.list_equivalent_task(**TASK, status=status)
    assert not backend.sent_since(conn, marker)


# -- time zones ----------------------------------------------------------------


@pytest.mark.parametrize("bulk", [False, True], ids=["insert_task", "insert_tasks"])
def test_naive_data_hora_is_read_in_the_session_time_zone(backend, client, conn, bulk):
    backend.set_time_zone(conn, "-03:00")
    naive = datetime.datetime(2030, 6, 15, 9, 30, 0, 123456)
    if bulk:
        (task_id,) = client.insert_tasks([dict(TASK, data_hora=naive)])
    else:
        task_id = client.insert_task(**TASK, data_hora=naive)
    conn.commit()
    row = backend.row(task_id)
    assert row["data_hora"] == datetime.datetime(2030, 6, 15, 12, 30, 0, 123456, tzinfo=UTC)
    assert row["data_hora_inicial"] == row["data_hora"]


@pytest.mark.parametrize("bulk", [False, True], ids=["insert_task", "insert_tasks"])
def test_aware_data_hora_is_kept_whatever_the_session_zone(backend, client, conn, bulk):
    backend.set_time_zone(conn, "+09:00")
    aware = datetime.datetime(
        2030, 6, 15, 9, 30, 0, 654321, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
    )
    if bulk:
        (task_id,) = client.insert_tasks([dict(TASK, data_hora=aware)])
    else:
        task_id = client.insert_task(**TASK, data_hora=aware)
    conn.commit()
    assert backend.row(task_id)["data_hora"] == aware


def test_default_time_is_exact_whatever_the_session_zone(backend, client, conn):
    backend.set_time_zone(conn, "+05:30")
    before = backend.now()
    task_id = client.insert_task(**TASK)
    conn.commit()
    assert before <= backend.row(task_id)["data_hora"] <= backend.now()


# -- pub/sub deliveries ----------------------------------------------------------------


def test_subscribers_and_deliveries(backend, conn):
    subscribers = [
        ("any-tenant", None, None, "emitir_nota", True),
        ("tenant-1", 1, None, "emitir_nota", True),
        ("tenant-2", 2, None, "emitir_nota", True),
        ("group-g", None, "g", "emitir_nota", True),
        ("inactive", None, None, "emitir_nota", False),
        ("other-process", None, None, "cancelar_nota", True),
    ]
    for subscriber in subscribers:
        backend.execute(
            f"INSERT INTO {backend.subscriber_table} (id, tenant, grupo_empresarial, processo, ativo) "
            "VALUES (%s, %s, %s, %s, %s)",
            subscriber,
        )
    store = backend.new_store()  # the store QueueClient uses
    found = store.list_subscribers(conn, "emitir_nota", 1, "g")
    assert [s["id"] for s in found] == ["any-tenant", "group-g", "tenant-1"]
    assert found[0]["ativo"] is True
    assert [s["id"] for s in store.list_subscribers(conn, "emitir_nota", None, None)] == [
        "any-tenant"
    ]

    publication = dict(TASK, tenant=1, grupo_empresarial="g", prioridade=70)
    publication["id"] = backend.client(conn).insert_task_pub_sub(**publication)
    deliveries = [("any-tenant", '{"a":1}', payload_hash('{"a":1}')), ("tenant-1", None, None)]
    ids = store.insert_deliveries(conn, publication, deliveries)
    assert store.insert_deliveries(conn, publication, []) == []
    conn.commit()
    rows = [backend.row(i) for i in ids]
    assert [(r["subscriber_id"], r["payload"], r["payload_hash"]) for r in rows] == deliveries
    for row in rows:
        assert (row["publication_id"], row["pub_sub"], row["status"]) == (
            publication["id"],
            False,
            "pendente",
        )
        assert (row["tenant"], row["grupo_empresarial"], row["prioridade"]) == (1, "g", 70)
        assert row["data_hora_inicial"] == row["data_hora"]


def test_get_task_resolves_a_later_attempts_payload(backend, conn):
    first = backend.enqueue(payload="do primeiro")
    execute(
        backend.admin,
        f"INSERT INTO {backend.table} (id_inicial, processo, payload, tentativa) "
        "VALUES (%s, 'emitir_nota', NULL, 2)",
        (first,),
    )
    later = backend.value(f"SELECT max(id) FROM {backend.table}")
    store = backend.new_store()  # the store QueueClient uses
    assert store.get_task(conn, later)["payload"] == "do primeiro"
    assert store.get_task(conn, first)["tentativa"] == 1
    assert store.get_task(conn, later + 1) is None
