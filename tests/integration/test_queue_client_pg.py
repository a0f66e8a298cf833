"""QueueClient on a real PostgreSQL, through psycopg 3 and psycopg2 connections.

The connection under test (``conn``) is never autocommit: the client must
enqueue inside the caller's transaction. What is really stored is read from a
second, autocommit connection (``pg_autocommit``), which sees only committed rows.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import zoneinfo

import pytest

from nsj_queue_lib import QueueClient
from nsj_queue_lib.payload import payload_hash, serialize_payload
from tests.helpers.databases import connect_pg, count_rows, table_exists, transaction_status

DRIVERS = ["psycopg", "psycopg2"]
TASK = dict(
    origem="erp",
    destino="fiscal",
    processo="emitir_nota",
    chave_externa="pedido-1",
    payload="texto",
)


@pytest.fixture(params=DRIVERS)
def conn(request, pg_dsn, pg_queue):
    # Depends on pg_queue so that it is closed before the queue is dropped:
    # an open transaction would otherwise hold a lock the DROP waits for.
    connection = connect_pg(pg_dsn, request.param, autocommit=False)
    try:
        yield connection
    finally:
        connection.close()  # an open transaction is rolled back by the server


@pytest.fixture
def client(conn, pg_queue):
    return QueueClient(conn, pg_queue.table, pg_queue.subscriber_table)


def stored(observer, table: str, task_id: int) -> dict | None:
    cur = observer.execute(f"SELECT * FROM {table} WHERE id = %s", (task_id,))
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([c.name for c in cur.description], row, strict=True))


# -- transactions ---------------------------------------------------------------


def test_rolled_back_enqueue_leaves_nothing(client, conn, pg_queue, pg_autocommit):
    task_id = client.insert_task(**TASK)
    assert isinstance(task_id, int)
    assert transaction_status(conn) == "INTRANS"
    conn.rollback()
    assert count_rows(pg_autocommit, pg_queue.table) == 0
    assert stored(pg_autocommit, pg_queue.table, task_id) is None


def test_client_never_commits(client, conn, pg_queue, pg_autocommit):
    task_id = client.insert_task(**TASK)
    client.insert_tasks([TASK, TASK])
    client.list_equivalent_task(**TASK)
    assert transaction_status(conn) == "INTRANS"
    assert count_rows(pg_autocommit, pg_queue.table) == 0  # invisible until the caller commits
    conn.commit()
    assert count_rows(pg_autocommit, pg_queue.table) == 3
    assert stored(pg_autocommit, pg_queue.table, task_id)["chave_externa"] == "pedido-1"


def test_committed_enqueue_has_the_contract_defaults(client, conn, pg_queue, pg_autocommit):
    before = pg_autocommit.execute("SELECT clock_timestamp()").fetchone()[0]
    task_id = client.insert_task(**TASK)
    conn.commit()
    after = pg_autocommit.execute("SELECT clock_timestamp()").fetchone()[0]
    row = stored(pg_autocommit, pg_queue.table, task_id)
    assert row["id"] == task_id
    assert (
        row["origem"],
        row["destino"],
        row["processo"],
        row["chave_externa"],
        row["payload"],
    ) == (
        "erp",
        "fiscal",
        "emitir_nota",
        "pedido-1",
        "texto",
    )
    assert row["status"] == "pendente"
    assert row["tentativa"] == 1
    assert row["prioridade"] == 50
    assert row["pub_sub"] is False
    assert row["dead"] is False
    assert row["reenfileirado"] is False
    assert row["estouro_tentativas"] is False
    assert before <= row["data_hora"] <= after
    # The first attempt starts when it is due (two clock readings, microseconds apart).
    assert abs(row["data_hora_inicial"] - row["data_hora"]) < datetime.timedelta(seconds=1)
    assert row["payload_hash"] == hashlib.sha256(b"texto").hexdigest().encode("ascii")
    assert row["tenant"] is None and row["grupo_empresarial"] is None
    assert row["mensagem"] is None and row["proxima_tentativa"] is None
    assert row["live_id"] is None and row["publication_id"] is None and row["subscriber_id"] is None


def test_each_insert_returns_its_own_id(client, conn, pg_queue, pg_autocommit):
    ids = [client.insert_task(**dict(TASK, chave_externa=str(n))) for n in range(3)]
    conn.commit()
    assert len(set(ids)) == 3
    for n, task_id in enumerate(ids):
        assert stored(pg_autocommit, pg_queue.table, task_id)["chave_externa"] == str(n)


def test_explicit_fields_are_stored(client, conn, pg_queue, pg_autocommit):
    when = datetime.datetime(2031, 2, 3, 4, 5, 6, tzinfo=datetime.timezone.utc)
    task_id = client.insert_task(
        **TASK, tenant=47, grupo_empresarial="grupo", data_hora=when, prioridade=0
    )
    big = client.insert_task(**TASK, tenant=2**40, prioridade=2**31 - 1)
    conn.commit()
    row = stored(pg_autocommit, pg_queue.table, task_id)
    assert (row["tenant"], row["grupo_empresarial"], row["prioridade"]) == (47, "grupo", 0)
    assert row["data_hora"] == when and row["data_hora_inicial"] == when
    row = stored(pg_autocommit, pg_queue.table, big)
    assert (row["tenant"], row["prioridade"]) == (2**40, 2**31 - 1)


@pytest.mark.parametrize("method", ["insert_task_pub_sub", "insert_task_webhook"])
def test_publications_set_pub_sub(client, conn, pg_queue, pg_autocommit, method):
    task_id = getattr(client, method)(**TASK, tenant=1, grupo_empresarial="g", prioridade=70)
    conn.commit()
    row = stored(pg_autocommit, pg_queue.table, task_id)
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
        {},
        [],
    ],
    ids=["dict", "list", "empty-dict", "empty-list"],
)
def test_json_payloads_round_trip_as_sorted_text(client, conn, pg_queue, pg_autocommit, payload):
    task_id = client.insert_task(**dict(TASK, payload=payload))
    conn.commit()
    row = stored(pg_autocommit, pg_queue.table, task_id)
    assert json.loads(row["payload"]) == payload
    assert row["payload"] == json.dumps(
        payload, sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    assert row["payload_hash"] == hashlib.sha256(row["payload"].encode()).hexdigest().encode()


def test_equal_dicts_store_the_same_text_and_hash(client, conn, pg_queue, pg_autocommit):
    first = client.insert_task(**dict(TASK, payload={"x": 1, "y": [1, 2]}))
    second = client.insert_task(**dict(TASK, payload={"y": [1, 2], "x": 1}))
    conn.commit()
    a = stored(pg_autocommit, pg_queue.table, first)
    b = stored(pg_autocommit, pg_queue.table, second)
    assert (a["payload"], a["payload_hash"]) == (b["payload"], b["payload_hash"])


@pytest.mark.parametrize("payload", [None, ""])
def test_no_payload_no_hash(client, conn, pg_queue, pg_autocommit, payload):
    task_id = client.insert_task(**dict(TASK, payload=payload))
    conn.commit()
    row = stored(pg_autocommit, pg_queue.table, task_id)
    assert row["payload"] == payload
    assert row["payload_hash"] is None


# -- insert_tasks --------------------------------------------------------------


def test_insert_tasks_10000_in_one_call(client, conn, pg_queue, pg_autocommit):
    tasks = [
        dict(TASK, chave_externa=str(n), payload={"n": n}, prioridade=n % 100, tenant=n % 7 or None)
        for n in range(10_000)
    ]
    ids = client.insert_tasks(tasks)
    assert transaction_status(conn) == "INTRANS"
    conn.commit()
    assert len(ids) == 10_000 and len(set(ids)) == 10_000
    assert all(isinstance(i, int) for i in ids)
    rows = dict(
        (r[0], r[1:])
        for r in pg_autocommit.execute(
            f"SELECT id, chave_externa, payload, prioridade, tenant, status, pub_sub FROM {pg_queue.table}"
        )
    )
    assert len(rows) == 10_000
    for n, task_id in enumerate(ids):
        assert rows[task_id] == (
            str(n),
            f'{{"n":{n}}}',
            n % 100,
            n % 7 or None,
            "pendente",
            False,
        ), n


def test_insert_tasks_fills_what_insert_task_fills(client, conn, pg_queue, pg_autocommit):
    when = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
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
    reference = stored(pg_autocommit, pg_queue.table, single)
    row = stored(pg_autocommit, pg_queue.table, plain)
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
    assert abs(row["data_hora_inicial"] - row["data_hora"]) < datetime.timedelta(seconds=1)
    row = stored(pg_autocommit, pg_queue.table, full)
    assert (
        row["tenant"],
        row["grupo_empresarial"],
        row["data_hora"],
        row["data_hora_inicial"],
        row["prioridade"],
        row["payload"],
    ) == (3, "g", when, when, 7, '["a"]')
    assert row["payload_hash"] == payload_hash('["a"]')
    assert stored(pg_autocommit, pg_queue.table, pub)["pub_sub"] is True


def test_insert_tasks_empty(client, conn):
    assert client.insert_tasks([]) == []
    assert transaction_status(conn) == "IDLE"


def test_a_bad_item_in_insert_tasks_writes_nothing(client, conn, pg_queue, pg_autocommit):
    tasks = [dict(TASK, chave_externa=str(n)) for n in range(100)]
    tasks.append(dict(TASK, prioridade=-1))
    with pytest.raises(ValueError, match="#100"):
        client.insert_tasks(tasks)
    assert transaction_status(conn) == "IDLE"  # nothing was sent
    conn.commit()
    assert count_rows(pg_autocommit, pg_queue.table) == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"origem": "x"},  # missing fields
        dict(TASK, unknown_field=1),
        dict(TASK, pub_sub="yes"),
        "not a mapping",
    ],
    ids=["missing", "unknown", "pub_sub-not-bool", "not-a-mapping"],
)
def test_malformed_items_in_insert_tasks(client, conn, pg_queue, pg_autocommit, bad):
    with pytest.raises((ValueError, TypeError)):
        client.insert_tasks([TASK, bad])
    assert transaction_status(conn) == "IDLE"


# -- refused table names and arguments -----------------------------------------

MALICIOUS_TABLES = [
    'public."fila"',
    "fila'",
    "fila; drop table x",
    "fila;",
    "fila teste",
    " fila",
    "a.b.c",
    "",
    "fila--",
    "1fila",
    "fila\n",
]


@pytest.mark.parametrize("name", MALICIOUS_TABLES)
def test_malicious_table_names_are_refused_before_any_sql(conn, pg_queue, pg_autocommit, name):
    with pytest.raises(ValueError):
        QueueClient(conn, name, pg_queue.subscriber_table)
    with pytest.raises(ValueError):
        QueueClient(conn, pg_queue.table, name)
    assert transaction_status(conn) == "IDLE"
    assert table_exists(pg_autocommit, pg_queue.table)


def test_injection_attempt_leaves_the_queue_intact(conn, pg_queue, pg_autocommit):
    with pytest.raises(ValueError):
        QueueClient(conn, f"{pg_queue.table}; DROP TABLE {pg_queue.table}; --")
    conn.commit()
    assert table_exists(pg_autocommit, pg_queue.table)


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


@pytest.mark.parametrize(
    "changes", [c for _, c in BAD_ARGUMENTS], ids=[i for i, _ in BAD_ARGUMENTS]
)
def test_bad_arguments_raise_value_error_and_write_nothing(
    client, conn, pg_queue, pg_autocommit, changes
):
    for method in ("insert_task", "insert_task_pub_sub", "insert_task_webhook"):
        with pytest.raises(ValueError):
            getattr(client, method)(**dict(TASK, **changes))
        assert transaction_status(conn) == "IDLE", method
    with pytest.raises(ValueError):
        client.insert_tasks([dict(TASK, **changes)])
    assert transaction_status(conn) == "IDLE"
    conn.commit()
    assert count_rows(pg_autocommit, pg_queue.table) == 0


def test_limits_are_inclusive(client, conn, pg_queue, pg_autocommit):
    task_id = client.insert_task(
        origem="o" * 150,
        destino="d" * 150,
        processo="p" * 250,
        chave_externa="k" * 100,
        payload="x",
        grupo_empresarial="g" * 40,
    )
    conn.commit()
    assert stored(pg_autocommit, pg_queue.table, task_id)["chave_externa"] == "k" * 100


def test_bad_arguments_inside_an_open_transaction_keep_it_usable(
    client, conn, pg_queue, pg_autocommit
):
    first = client.insert_task(**TASK)
    with pytest.raises(ValueError):
        client.insert_task(**dict(TASK, prioridade=-5))
    assert transaction_status(conn) == "INTRANS"  # not aborted: the bad call sent nothing
    second = client.insert_task(**TASK)
    conn.commit()
    assert {r[0] for r in pg_autocommit.execute(f"SELECT id FROM {pg_queue.table}")} == {
        first,
        second,
    }


def test_unsupported_connection_is_refused(pg_queue):
    with pytest.raises(TypeError):
        QueueClient(object(), pg_queue.table)


# -- list_equivalent_task ------------------------------------------------------


def test_list_equivalent_task_filters(client, conn, pg_queue, pg_autocommit):
    base = dict(TASK, payload={"pedido": 1, "itens": [1, 2]}, tenant=10, grupo_empresarial="g1")
    match = client.insert_task(**base)
    other_tenant = client.insert_task(**dict(base, tenant=11))
    no_tenant = client.insert_task(**dict(base, tenant=None))
    other_group = client.insert_task(**dict(base, grupo_empresarial="g2"))
    other_payload = client.insert_task(**dict(base, payload={"pedido": 2, "itens": [1, 2]}))
    other_key = client.insert_task(**dict(base, chave_externa="pedido-2"))
    other_origin = client.insert_task(**dict(base, origem="crm"))
    other_process = client.insert_task(**dict(base, processo="cancelar_nota"))
    failed = client.insert_task(**base)
    scheduled = client.insert_task(**base)
    done = client.insert_task(**base)
    conn.commit()
    pg_autocommit.execute(f"UPDATE {pg_queue.table} SET status = 'falha' WHERE id = %s", (failed,))
    pg_autocommit.execute(
        f"UPDATE {pg_queue.table} SET status = 'agendada' WHERE id = %s", (scheduled,)
    )
    pg_autocommit.execute(f"UPDATE {pg_queue.table} SET status = 'sucesso' WHERE id = %s", (done,))

    same_dict_other_order = {"itens": [1, 2], "pedido": 1}
    query = dict(base, payload=same_dict_other_order)
    found = client.list_equivalent_task(**query)
    assert sorted(r["id"] for r in found) == sorted([match, scheduled, done])
    assert all(isinstance(r, dict) for r in found)
    first = next(r for r in found if r["id"] == match)
    assert first["payload"] == serialize_payload(base["payload"])
    assert first["status"] == "pendente"

    assert [r["id"] for r in client.list_equivalent_task(**query, status=["falha"])] == [failed]
    assert [r["id"] for r in client.list_equivalent_task(**query, status="falha")] == [failed]
    assert sorted(r["id"] for r in client.list_equivalent_task(**query, status=("pendente",))) == [
        match
    ]
    assert [r["id"] for r in client.list_equivalent_task(**dict(query, tenant=11))] == [
        other_tenant
    ]
    assert [r["id"] for r in client.list_equivalent_task(**dict(query, tenant=None))] == [no_tenant]
    assert [
        r["id"] for r in client.list_equivalent_task(**dict(query, grupo_empresarial="g2"))
    ] == [other_group]
    assert client.list_equivalent_task(**dict(query, grupo_empresarial="g3")) == []
    assert [
        r["id"]
        for r in client.list_equivalent_task(**dict(query, payload={"pedido": 2, "itens": [1, 2]}))
    ] == [other_payload]
    assert [
        r["id"] for r in client.list_equivalent_task(**dict(query, chave_externa="pedido-2"))
    ] == [other_key]
    assert [r["id"] for r in client.list_equivalent_task(**dict(query, origem="crm"))] == [
        other_origin
    ]
    assert [
        r["id"] for r in client.list_equivalent_task(**dict(query, processo="cancelar_nota"))
    ] == [other_process]
    assert client.list_equivalent_task(**dict(query, destino="outro")) == []


def test_list_equivalent_task_with_text_payload_and_no_payload(client, conn):
    text_id = client.insert_task(**dict(TASK, payload="conteúdo da mensagem"))
    empty_id = client.insert_task(**dict(TASK, payload=None))
    # Uncommitted rows are visible to the caller's own transaction.
    assert [
        r["id"] for r in client.list_equivalent_task(**dict(TASK, payload="conteúdo da mensagem"))
    ] == [text_id]
    assert [r["id"] for r in client.list_equivalent_task(**dict(TASK, payload=None))] == [empty_id]


@pytest.mark.parametrize("status", [[], ["feito"], ("pendente", "nope")])
def test_list_equivalent_task_refuses_unknown_statuses(client, conn, status):
    with pytest.raises(ValueError):
        client.list_equivalent_task(**TASK, status=status)
    assert transaction_status(conn) == "IDLE"


# -- time zones ----------------------------------------------------------------

ZONE = "America/Sao_Paulo"  # UTC-3, no daylight saving since 2019


@pytest.mark.parametrize("bulk", [False, True], ids=["insert_task", "insert_tasks"])
def test_naive_data_hora_is_read_in_the_session_time_zone(
    client, conn, pg_queue, pg_autocommit, bulk
):
    with conn.cursor() as cur:
        cur.execute(f"SET TIME ZONE '{ZONE}'")
    naive = datetime.datetime(2030, 6, 15, 9, 30)
    if bulk:
        (task_id,) = client.insert_tasks([dict(TASK, data_hora=naive)])
    else:
        task_id = client.insert_task(**TASK, data_hora=naive)
    conn.commit()
    row = stored(pg_autocommit, pg_queue.table, task_id)
    expected = naive.replace(tzinfo=zoneinfo.ZoneInfo(ZONE))
    assert row["data_hora"] == expected
    assert row["data_hora"] == datetime.datetime(2030, 6, 15, 12, 30, tzinfo=datetime.timezone.utc)
    assert row["data_hora_inicial"] == expected


def test_aware_data_hora_is_kept_whatever_the_session_zone(client, conn, pg_queue, pg_autocommit):
    with conn.cursor() as cur:
        cur.execute("SET TIME ZONE 'Asia/Tokyo'")
    aware = datetime.datetime(2030, 6, 15, 9, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Lisbon"))
    task_id = client.insert_task(**TASK, data_hora=aware)
    conn.commit()
    assert stored(pg_autocommit, pg_queue.table, task_id)["data_hora"] == aware
