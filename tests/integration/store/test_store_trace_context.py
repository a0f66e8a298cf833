"""The trace_context column through every statement that writes or reads a task, on each store.

What the client stores (one insert, a bulk insert, a COPY-sized bulk insert on
PostgreSQL), what a claim returns (the claim routine and the socket server's
claim), and what retries, dead letters and pub/sub deliveries copy. The context
comes from QueueClient's capture (observability/trace_context.py), patched here:
these tests need no OpenTelemetry.
"""

from __future__ import annotations

import pytest

from nsj_queue_lib.db.postgres.client_store import COPY_THRESHOLD
from tests.integration.store.backends import CLIENT_PATHS, EVERY_STORE, on

pytestmark = pytest.mark.timeout(60)

CONTEXT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01;congo=t61rcWkgMzE"
TASK = dict(origem="o", destino="d", processo="p", chave_externa="k", payload="x")


@pytest.fixture
def traced(monkeypatch):
    """QueueClient enqueues as inside a span whose stored form is CONTEXT."""
    monkeypatch.setattr("nsj_queue_lib.queue_client.capture", lambda: CONTEXT)


def stored(backend) -> dict[int, str | None]:
    return {r["id"]: r["trace_context"] for r in backend.rows()}


@on(*CLIENT_PATHS)
def test_every_insert_of_the_client_stores_the_context(backend, traced):
    conn = backend.client_conn()
    client = backend.client(conn)
    one = client.insert_task(**TASK)
    keyed = [] if backend.kind == "singlestore" else [client.insert_task(**TASK, lock_key="L")]
    publication = client.insert_task_pub_sub(**TASK)
    few = client.insert_tasks([TASK] * 3)
    many = client.insert_tasks([TASK] * COPY_THRESHOLD)  # COPY on psycopg 3
    conn.commit()
    untraced = backend.client(conn, trace_context=False).insert_task(**TASK)
    conn.commit()
    rows = stored(backend)
    for task_id in (one, *keyed, publication, *few, *many):
        assert rows[task_id] == CONTEXT, task_id
    assert rows[untraced] is None


@on(*CLIENT_PATHS)
def test_without_a_span_the_plain_insert_names_no_trace_column(backend):
    # The table without the column (a client ahead of db_gen --upgrade) still takes tasks.
    backend.execute(f"ALTER TABLE {backend.table} DROP COLUMN trace_context")
    conn = backend.client_conn()
    client = backend.client(conn)
    client.insert_task(**TASK)
    client.insert_tasks([TASK] * 3)
    client.insert_tasks([TASK] * COPY_THRESHOLD)
    conn.commit()
    assert len(backend.rows()) == 4 + COPY_THRESHOLD


@on(*EVERY_STORE)
def test_claims_return_it_and_retries_dead_letters_and_deliveries_copy_it(backend, traced):
    conn = backend.client_conn()
    first, second = backend.client(conn).insert_tasks([TASK, dict(TASK, chave_externa="k2")])
    conn.commit()
    store, worker = backend.store, backend.worker()
    task = backend.claim(worker)
    assert task.id == first and task.row["trace_context"] == CONTEXT
    store.rollback(worker)
    store.begin(worker)
    retry = store.fail_and_retry(worker, task.id, "falha", "boom", 0.0)
    backend.unlock(worker, task.id)
    store.commit(worker)
    task = backend.claim(worker)
    assert task.id == second
    store.rollback(worker)
    store.begin(worker)
    dead = store.fail_and_bury(worker, task.id, "falha", "boom", task.payload)
    backend.unlock(worker, task.id)
    store.commit(worker)
    # A delivery stores the context it is given (pubsub.publish: the fan-out's span).
    other = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    publication = {**task.row, "trace_context": other}
    [delivery] = store.insert_deliveries(conn, publication, [("s", "{}", None)])
    conn.commit()
    rows = stored(backend)
    assert (rows[retry], rows[dead], rows[delivery]) == (CONTEXT, CONTEXT, other)
