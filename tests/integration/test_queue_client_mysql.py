"""QueueClient on a real MariaDB through PyMySQL connections.

The connection under test (``mysql_conn``) is not autocommit: the client must
enqueue inside the caller's transaction. What is really stored is read from a
second, autocommit connection (``mysql_admin``), which sees only committed rows.
"""

from __future__ import annotations

import datetime
import hashlib
import json

import pytest

from nsj_queue_lib import QueueClient
from nsj_queue_lib.db.mysql import store as mysql_store
from nsj_queue_lib.db.mysql.store import MysqlQueueStore
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.payload import payload_hash, serialize_payload
from tests.helpers.mysql_queue import (
    connect,
    count_rows,
    fetch_dicts,
    fetch_value,
    in_transaction,
    questions,
    row_of,
)

pytestmark = pytest.mark.mysql

TASK = dict(
    origem="erp",
    destino="fiscal",
    processo="emitir_nota",
    chave_externa="pedido-1",
    payload="texto",
)
UTC = datetime.timezone.utc


@pytest.fixture
def client(mysql_conn, mysql_queue):
    return QueueClient(mysql_conn, mysql_queue.table, mysql_queue.subscriber_table)


@pytest.fixture(params=["mariadb", "mysql", "singlestore"])
def flavour(request, mysql_conn, monkeypatch):
    """Run a test through each way of reading back ids: RETURNING (MariaDB),
    LAST_INSERT_ID + consecutive ids (MySQL 8), one row per INSERT (SingleStore)."""
    increment = fetch_value(mysql_conn, "SELECT @@auto_increment_increment")
    monkeypatch.setattr(
        MysqlQueueStore,
        "server",
        lambda self, conn: mysql_store._ServerInfo(request.param, increment),
    )
    return request.param


def db_now(conn) -> datetime.datetime:
    return fetch_value(conn, "SELECT NOW(6)")


# -- transactions ---------------------------------------------------------------


def test_rolled_back_enqueue_leaves_nothing(client, mysql_conn, mysql_queue, mysql_admin):
    task_id = client.insert_task(**TASK)
    assert isinstance(task_id, int)
    assert in_transaction(mysql_conn)
    mysql_conn.rollback()
    assert count_rows(mysql_admin, mysql_queue.table) == 0
    assert row_of(mysql_admin, mysql_queue.table, task_id) is None


def test_client_never_commits(client, mysql_conn, mysql_queue, mysql_admin):
    task_id = client.insert_task(**TASK)
    client.insert_tasks([TASK, TASK])
    client.list_equivalent_task(**TASK)
    assert in_transaction(mysql_conn)
    assert count_rows(mysql_admin, mysql_queue.table) == 0  # invisible until the caller commits
    mysql_conn.commit()
    assert count_rows(mysql_admin, mysql_queue.table) == 3
    assert row_of(mysql_admin, mysql_queue.table, task_id)["chave_externa"] == "pedido-1"


def test_committed_enqueue_has_the_contract_defaults(client, mysql_conn, mysql_queue, mysql_admin):
    before = db_now(mysql_admin)
    task_id = client.insert_task(**TASK)
    mysql_conn.commit()
    after = db_now(mysql_admin)
    row = row_of(mysql_admin, mysql_queue.table, task_id)
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
    assert (row["pub_sub"], row["dead"], row["reenfileirado"], row["estouro_tentativas"]) == (
        0,
        0,
        0,
        0,
    )
    assert before <= row["data_hora"] <= after
    assert row["data_hora_inicial"] == row["data_hora"]  # the same instant, to the microsecond
    assert row["payload_hash"] == hashlib.sha256(b"texto").hexdigest().encode("ascii")
    assert row["tenant"] is None and row["grupo_empresarial"] is None
    assert row["mensagem"] is None and row["proxima_tentativa"] is None
    assert row["live_id"] is None and row["publication_id"] is None and row["subscriber_id"] is None


def test_times_keep_microseconds(client, mysql_conn, mysql_queue, mysql_admin):
    ids = [client.insert_task(**TASK) for _ in range(5)]
    mysql_conn.commit()
    stamps = [row_of(mysql_admin, mysql_queue.table, i)["data_hora"] for i in ids]
    assert any(s.microsecond for s in stamps)
    assert stamps == sorted(stamps)


def test_each_insert_returns_its_own_id(client, mysql_conn, mysql_queue, mysql_admin, flavour):
    ids = [client.insert_task(**dict(TASK, chave_externa=str(n))) for n in range(3)]
    mysql_conn.commit()
    assert len(set(ids)) == 3
    for n, task_id in enumerate(ids):
        assert row_of(mysql_admin, mysql_queue.table, task_id)["chave_externa"] == str(n)


def test_explicit_fields_are_stored(client, mysql_conn, mysql_queue, mysql_admin):
    when = datetime.datetime(2031, 2, 3, 4, 5, 6, 789, tzinfo=UTC)
    task_id = client.insert_task(
        **TASK, tenant=47, grupo_empresarial="grupo", data_hora=when, prioridade=0
    )
    big = client.insert_task(**TASK, tenant=2**40, prioridade=2**31 - 1)
    mysql_conn.commit()
    row = row_of(
        mysql_admin, mysql_queue.table, task_id
    )  # the admin session is UTC (the server's zone)
    assert (row["tenant"], row["grupo_empresarial"], row["prioridade"]) == (47, "grupo", 0)
    assert row["data_hora"] == when.replace(tzinfo=None) and row[
        "data_hora_inicial"
    ] == when.replace(tzinfo=None)
    row = row_of(mysql_admin, mysql_queue.table, big)
    assert (row["tenant"], row["prioridade"]) == (2**40, 2**31 - 1)


@pytest.mark.parametrize("method", ["insert_task_pub_sub", "insert_task_webhook"])
def test_publications_set_pub_sub(client, mysql_conn, mysql_queue, mysql_admin, method):
    task_id = getattr(client, method)(**TASK, tenant=1, grupo_empresarial="g", prioridade=70)
    mysql_conn.commit()
    row = row_of(mysql_admin, mysql_queue.table, task_id)
    assert row["pub_sub"] == 1
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
def test_json_payloads_round_trip_as_sorted_text(
    client, mysql_conn, mysql_queue, mysql_admin, payload
):
    task_id = client.insert_task(**dict(TASK, payload=payload))
    mysql_conn.commit()
    row = row_of(mysql_admin, mysql_queue.table, task_id)
    assert json.loads(row["payload"]) == payload
    assert row["payload"] == json.dumps(
        payload, sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    assert row["payload_hash"] == hashlib.sha256(row["payload"].encode()).hexdigest().encode()


def test_large_payload_round_trips(client, mysql_conn, mysql_queue, mysql_admin):
    text = "x" * 300_000  # more than a TEXT column (64 KiB) holds
    task_id = client.insert_task(**dict(TASK, payload=text))
    mysql_conn.commit()
    assert row_of(mysql_admin, mysql_queue.table, task_id)["payload"] == text


def test_equal_dicts_store_the_same_text_and_hash(client, mysql_conn, mysql_queue, mysql_admin):
    first = client.insert_task(**dict(TASK, payload={"x": 1, "y": [1, 2]}))
    second = client.insert_task(**dict(TASK, payload={"y": [1, 2], "x": 1}))
    mysql_conn.commit()
    a = row_of(mysql_admin, mysql_queue.table, first)
    b = row_of(mysql_admin, mysql_queue.table, second)
    assert (a["payload"], a["payload_hash"]) == (b["payload"], b["payload_hash"])


@pytest.mark.parametrize("payload", [None, ""])
def test_no_payload_no_hash(client, mysql_conn, mysql_queue, mysql_admin, payload):
    task_id = client.insert_task(**dict(TASK, payload=payload))
    mysql_conn.commit()
    row = row_of(mysql_admin, mysql_queue.table, task_id)
    assert row["payload"] == payload
    assert row["payload_hash"] is None


PAYLOADS = [{"pedido": 1, "itens": [1, 2], "texto": "ação"}, ["a", {"b": None}], "texto puro"]


@pytest.mark.parametrize("payload", PAYLOADS, ids=["dict", "list", "text"])
def test_payload_hash_is_the_same_as_on_postgresql(
    client, mysql_conn, mysql_queue, mysql_admin, pg_dsn, pg_queue, pg_autocommit, payload
):
    import psycopg

    mysql_id = client.insert_task(**dict(TASK, payload=payload))
    mysql_conn.commit()
    with psycopg.connect(pg_dsn) as pg_conn:
        pg_id = QueueClient(pg_conn, pg_queue.table).insert_task(**dict(TASK, payload=payload))
        pg_conn.commit()
    pg_row = pg_autocommit.execute(
        f"SELECT payload, payload_hash FROM {pg_queue.table} WHERE id = %s", (pg_id,)
    ).fetchone()
    mysql_row = row_of(mysql_admin, mysql_queue.table, mysql_id)
    assert mysql_row["payload"] == pg_row[0]
    assert mysql_row["payload_hash"] == bytes(pg_row[1]) == payload_hash(serialize_payload(payload))


# -- insert_tasks --------------------------------------------------------------


def test_insert_tasks_10000_in_one_call(client, mysql_conn, mysql_queue, mysql_admin, flavour):
    count = 10_000 if flavour != "singlestore" else 500  # one statement per row there
    tasks = [
        dict(TASK, chave_externa=str(n), payload={"n": n}, prioridade=n % 100, tenant=n % 7 or None)
        for n in range(count)
    ]
    sent_before = questions(mysql_conn)
    ids = client.insert_tasks(tasks)
    sent = questions(mysql_conn) - sent_before - 1  # the second questions() counts itself
    if flavour == "mariadb":
        assert sent == 1  # one multi-row INSERT ... RETURNING
    elif flavour == "mysql":
        assert sent == 1  # one multi-row INSERT; ids from LAST_INSERT_ID()
    else:
        assert sent == count
    assert in_transaction(mysql_conn)
    mysql_conn.commit()
    assert len(ids) == count and len(set(ids)) == count
    assert all(isinstance(i, int) for i in ids)
    rows = {
        r["id"]: r
        for r in fetch_dicts(
            mysql_admin,
            f"SELECT id, chave_externa, payload, prioridade, tenant, status, pub_sub FROM {mysql_queue.table}",
        )
    }
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
        ) == (str(n), f'{{"n":{n}}}', n % 100, n % 7 or None, "pendente", 0), n


def test_insert_tasks_beyond_one_statement_keeps_the_order(
    client, mysql_conn, mysql_queue, mysql_admin, monkeypatch
):
    monkeypatch.setattr(mysql_store, "INSERT_BATCH_BYTES", 2_000)
    tasks = [dict(TASK, chave_externa=str(n), payload="p" * 300) for n in range(40)]
    sent_before = questions(mysql_conn)
    ids = client.insert_tasks(tasks)
    assert questions(mysql_conn) - sent_before - 1 > 1  # split into several statements
    mysql_conn.commit()
    for n, task_id in enumerate(ids):
        assert row_of(mysql_admin, mysql_queue.table, task_id)["chave_externa"] == str(n)


def test_insert_tasks_fills_what_insert_task_fills(
    client, mysql_conn, mysql_queue, mysql_admin, flavour
):
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
    mysql_conn.commit()
    reference = row_of(mysql_admin, mysql_queue.table, single)
    row = row_of(mysql_admin, mysql_queue.table, plain)
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
    row = row_of(mysql_admin, mysql_queue.table, full)
    assert (
        row["tenant"],
        row["grupo_empresarial"],
        row["data_hora"],
        row["data_hora_inicial"],
        row["prioridade"],
        row["payload"],
    ) == (3, "g", when.replace(tzinfo=None), when.replace(tzinfo=None), 7, '["a"]')
    assert row["payload_hash"] == payload_hash('["a"]')
    assert row_of(mysql_admin, mysql_queue.table, pub)["pub_sub"] == 1


def test_insert_tasks_empty_sends_nothing(client, mysql_conn):
    sent_before = questions(mysql_conn)
    assert client.insert_tasks([]) == []
    assert questions(mysql_conn) - sent_before == 1


def test_a_bad_item_in_insert_tasks_writes_nothing(client, mysql_conn, mysql_queue, mysql_admin):
    tasks = [dict(TASK, chave_externa=str(n)) for n in range(100)]
    tasks.append(dict(TASK, prioridade=-1))
    sent_before = questions(mysql_conn)
    with pytest.raises(ValueError, match="#100"):
        client.insert_tasks(tasks)
    assert questions(mysql_conn) - sent_before == 1  # nothing was sent
    mysql_conn.commit()
    assert count_rows(mysql_admin, mysql_queue.table) == 0


# -- refused table names -------------------------------------------------------

MALICIOUS_TABLES = [
    "test.`fila`",
    'test."fila"',
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


@pytest.mark.parametrize("name", MALICIOUS_TABLES)
def test_malicious_table_names_are_refused_before_any_sql(
    mysql_conn, mysql_queue, mysql_admin, name
):
    sent_before = questions(mysql_conn)
    with pytest.raises(ValueError):
        QueueClient(mysql_conn, name, mysql_queue.subscriber_table)
    with pytest.raises(ValueError):
        QueueClient(mysql_conn, mysql_queue.table, name)
    assert questions(mysql_conn) - sent_before == 1  # only the status query itself
    assert (
        fetch_value(
            mysql_admin,
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s "
            "AND table_name = %s",
            (mysql_queue.database, mysql_queue.name),
        )
        == 1
    )


def test_injection_attempt_leaves_the_queue_intact(mysql_conn, mysql_queue, mysql_admin):
    with pytest.raises(ValueError):
        QueueClient(mysql_conn, f"{mysql_queue.table}; DROP TABLE {mysql_queue.table}; --")
    mysql_conn.commit()
    assert count_rows(mysql_admin, mysql_queue.table) == 0  # the table is still there


@pytest.mark.parametrize(
    "changes",
    [
        dict(processo=""),
        dict(prioridade=-1),
        dict(payload=42),
        dict(chave_externa="k" * 101),
        dict(tenant="1"),
    ],
    ids=["empty-processo", "negative-prioridade", "int-payload", "long-key", "str-tenant"],
)
def test_bad_arguments_send_nothing(client, mysql_conn, mysql_queue, mysql_admin, changes):
    sent_before = questions(mysql_conn)
    with pytest.raises(ValueError):
        client.insert_task(**dict(TASK, **changes))
    with pytest.raises(ValueError):
        client.insert_tasks([dict(TASK, **changes)])
    assert questions(mysql_conn) - sent_before == 1


def test_data_hora_outside_timestamp_range_is_refused(client, mysql_conn, mysql_queue, mysql_admin):
    far = datetime.datetime(2040, 1, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="2038"):
        client.insert_task(**TASK, data_hora=far)
    with pytest.raises(DatabaseError):  # naive: the server refuses it (strict mode)
        client.insert_task(**TASK, data_hora=far.replace(tzinfo=None))


def test_driver_errors_become_database_error(mysql_conn, mysql_queue):
    missing = QueueClient(mysql_conn, f"{mysql_queue.database}.no_such_table_{mysql_queue.name}")
    with pytest.raises(DatabaseError) as info:
        missing.insert_task(**TASK)
    assert type(info.value.__cause__).__module__.startswith("pymysql")


# -- list_equivalent_task ------------------------------------------------------


def test_list_equivalent_task_filters(client, mysql_conn, mysql_queue, mysql_admin):
    base = dict(TASK, payload={"pedido": 1, "itens": [1, 2]}, tenant=10, grupo_empresarial="g1")
    match = client.insert_task(**base)
    other_tenant = client.insert_task(**dict(base, tenant=11))
    no_tenant = client.insert_task(**dict(base, tenant=None))
    other_group = client.insert_task(**dict(base, grupo_empresarial="g2"))
    other_payload = client.insert_task(**dict(base, payload={"pedido": 2, "itens": [1, 2]}))
    other_key = client.insert_task(**dict(base, chave_externa="pedido-2"))
    other_case = client.insert_task(**dict(base, chave_externa="PEDIDO-1"))
    other_origin = client.insert_task(**dict(base, origem="crm"))
    failed = client.insert_task(**base)
    scheduled = client.insert_task(**base)
    done = client.insert_task(**base)
    mysql_conn.commit()
    with mysql_admin.cursor() as cur:
        cur.execute(f"UPDATE {mysql_queue.table} SET status = 'falha' WHERE id = %s", (failed,))
        cur.execute(
            f"UPDATE {mysql_queue.table} SET status = 'agendada' WHERE id = %s", (scheduled,)
        )
        cur.execute(f"UPDATE {mysql_queue.table} SET status = 'sucesso' WHERE id = %s", (done,))

    query = dict(base, payload={"itens": [1, 2], "pedido": 1})
    found = client.list_equivalent_task(**query)
    assert sorted(r["id"] for r in found) == sorted([match, scheduled, done])
    first = next(r for r in found if r["id"] == match)
    assert first["payload"] == serialize_payload(base["payload"])
    assert first["status"] == "pendente"
    assert first["pub_sub"] is False and first["dead"] is False  # booleans, as on PostgreSQL
    assert isinstance(first["payload_hash"], bytes)

    assert [r["id"] for r in client.list_equivalent_task(**query, status=["falha"])] == [failed]
    assert [r["id"] for r in client.list_equivalent_task(**query, status="falha")] == [failed]
    assert [r["id"] for r in client.list_equivalent_task(**dict(query, tenant=11))] == [
        other_tenant
    ]
    assert [r["id"] for r in client.list_equivalent_task(**dict(query, tenant=None))] == [no_tenant]
    assert [
        r["id"] for r in client.list_equivalent_task(**dict(query, grupo_empresarial="g2"))
    ] == [other_group]
    assert [
        r["id"]
        for r in client.list_equivalent_task(**dict(query, payload={"pedido": 2, "itens": [1, 2]}))
    ] == [other_payload]
    assert [
        r["id"] for r in client.list_equivalent_task(**dict(query, chave_externa="pedido-2"))
    ] == [other_key]
    # Keys compare byte for byte, as on PostgreSQL.
    assert [
        r["id"] for r in client.list_equivalent_task(**dict(query, chave_externa="PEDIDO-1"))
    ] == [other_case]
    assert [r["id"] for r in client.list_equivalent_task(**dict(query, origem="crm"))] == [
        other_origin
    ]
    assert client.list_equivalent_task(**dict(query, destino="outro")) == []


def test_list_equivalent_task_sees_the_callers_uncommitted_rows(client, mysql_conn):
    text_id = client.insert_task(**dict(TASK, payload="conteúdo da mensagem"))
    empty_id = client.insert_task(**dict(TASK, payload=None))
    assert [
        r["id"] for r in client.list_equivalent_task(**dict(TASK, payload="conteúdo da mensagem"))
    ] == [text_id]
    assert [r["id"] for r in client.list_equivalent_task(**dict(TASK, payload=None))] == [empty_id]


# -- time zones ----------------------------------------------------------------


@pytest.mark.parametrize("bulk", [False, True], ids=["insert_task", "insert_tasks"])
def test_naive_data_hora_is_read_in_the_session_time_zone(
    client, mysql_conn, mysql_queue, mysql_admin, bulk
):
    with mysql_conn.cursor() as cur:
        cur.execute("SET time_zone = '-03:00'")
    naive = datetime.datetime(2030, 6, 15, 9, 30, 0, 123456)
    if bulk:
        (task_id,) = client.insert_tasks([dict(TASK, data_hora=naive)])
    else:
        task_id = client.insert_task(**TASK, data_hora=naive)
    mysql_conn.commit()
    with mysql_admin.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    row = row_of(mysql_admin, mysql_queue.table, task_id)
    assert row["data_hora"] == datetime.datetime(2030, 6, 15, 12, 30, 0, 123456)
    assert row["data_hora_inicial"] == row["data_hora"]


@pytest.mark.parametrize("bulk", [False, True], ids=["insert_task", "insert_tasks"])
def test_aware_data_hora_is_kept_whatever_the_session_zone(
    client, mysql_conn, mysql_queue, mysql_admin, bulk
):
    with mysql_conn.cursor() as cur:
        cur.execute("SET time_zone = '+09:00'")
    aware = datetime.datetime(
        2030, 6, 15, 9, 30, 0, 654321, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
    )
    if bulk:
        (task_id,) = client.insert_tasks([dict(TASK, data_hora=aware)])
    else:
        task_id = client.insert_task(**TASK, data_hora=aware)
    mysql_conn.commit()
    with mysql_admin.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    stored = row_of(mysql_admin, mysql_queue.table, task_id)["data_hora"]
    assert stored.replace(tzinfo=UTC) == aware


def test_default_time_is_exact_whatever_the_session_zone(
    client, mysql_conn, mysql_queue, mysql_admin
):
    with mysql_conn.cursor() as cur:
        cur.execute("SET time_zone = '+05:30'")
    before = fetch_value(mysql_admin, "SELECT UTC_TIMESTAMP(6)")
    task_id = client.insert_task(**TASK)
    mysql_conn.commit()
    after = fetch_value(mysql_admin, "SELECT UTC_TIMESTAMP(6)")
    with mysql_admin.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    assert before <= row_of(mysql_admin, mysql_queue.table, task_id)["data_hora"] <= after


def test_unsupported_connection_is_refused(mysql_queue):
    with pytest.raises(TypeError):
        QueueClient(object(), mysql_queue.table)


def test_a_pymysql_connection_selects_the_mysql_store(client):
    assert type(client._store) is MysqlQueueStore


def test_client_on_a_queue_in_another_database(mysql_kwargs, mysql_admin):
    """``schema.table`` is ``database.table`` on MySQL: the connection's database does not matter."""
    from tests.helpers.databases import unique_queue_name
    from tests.helpers.mysql_queue import create_queue

    database = unique_queue_name("nsjq_db_")
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
    try:
        queue = create_queue(mysql_admin, database)
        conn = connect(mysql_kwargs)
        try:
            task_id = QueueClient(conn, queue.table).insert_task(**TASK)
            conn.commit()
        finally:
            conn.close()
        assert row_of(mysql_admin, queue.table, task_id)["status"] == "pendente"
    finally:
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP DATABASE {database}")
