"""Enqueue tasks inside your own transaction with ``QueueClient`` (psycopg 3).

    DB_HOST=localhost DB_BASE=app DB_USER=app QUEUE_TABLE=public.fila_teste \\
    python examples/enqueue.py

Then run a worker on the same queue (``python examples/worker_simple.py``)
to process what was enqueued. Connection variables are the worker's:
``DB_HOST``, ``DB_PORT``, ``DB_BASE``, ``DB_USER``, ``DB_PASS`` (unset ones
fall back to libpq's defaults: ``PGHOST``, ...). ``QUEUE_TABLE`` defaults to
``public.fila_teste``; create it first with
``python -m nsj_queue_lib.db_gen public fila_teste | psql ...``.

What it shows, one function each:

1. ``enqueue_with_business_write``: an order row and its task committed
   together, with a dict payload.
2. ``enqueue_rolled_back``: when the transaction rolls back, the task is gone
   too; no worker ever sees it.
3. ``enqueue_priority``: a task with a higher ``prioridade`` runs before the
   others that are ready (default 50).
4. ``enqueue_scheduled``: a task that must not run before a given time.
5. ``enqueue_bulk``: ``insert_tasks``, many tasks in one round trip.
6. ``enqueue_once``: ``list_equivalent_task`` to skip a task that is already
   queued (or already done).

The client only runs INSERT/SELECT on your connection: it never commits, rolls
back or opens connections. The task exists exactly when your transaction commits.
"""

from __future__ import annotations

import datetime
import os
import sys

import psycopg
from psycopg.conninfo import make_conninfo

from nsj_queue_lib import QueueClient
from nsj_queue_lib.identifiers import check_table_name, split_table_name

ORIGEM = "exemplo_enqueue"
DESTINO = "worker_simple"


def conninfo_from_env(environ=os.environ) -> str:
    """A libpq connection string from the worker's DB_* variables (or DATABASE_*)."""

    def get(name: str, alias: str) -> str | None:
        value = (environ.get(name) or environ.get(alias) or "").strip()
        return value or None

    return make_conninfo(
        host=get("DB_HOST", "DATABASE_HOST"),
        port=get("DB_PORT", "DATABASE_PORT"),
        dbname=get("DB_BASE", "DATABASE_NAME"),
        user=get("DB_USER", "DATABASE_USER"),
        password=get("DB_PASS", "DATABASE_PASS"),
        application_name="nsj_queue_lib:examples/enqueue.py",
    )


def order_table_for(queue_table: str) -> str:
    """A small business table next to the queue, so that there is something to commit with the task."""
    schema, _ = split_table_name(queue_table)
    return f"{schema}.exemplo_pedido" if schema else "exemplo_pedido"


def create_order_table(conn: psycopg.Connection, order_table: str) -> None:
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {check_table_name(order_table)} ("
        " numero varchar(30) PRIMARY KEY,"
        " status varchar(30) NOT NULL,"
        " criado_em timestamptz NOT NULL DEFAULT clock_timestamp())"
    )


def enqueue_with_business_write(conn, client: QueueClient, order_table: str, numero: str) -> int:
    """1. The order and its task commit together, or not at all."""
    with conn.transaction():  # BEGIN ... COMMIT (ROLLBACK if the block raises)
        conn.execute(
            f"INSERT INTO {order_table} (numero, status) VALUES (%s, 'faturar')"
            " ON CONFLICT (numero) DO UPDATE SET status = 'faturar'",
            (numero,),
        )
        task_id = client.insert_task(
            origem=ORIGEM,
            destino=DESTINO,
            processo="faturar_pedido",
            chave_externa=numero,  # your own key: the order number
            payload={"pedido": numero, "itens": 3},  # a dict is stored as JSON (sorted keys)
            tenant=47,  # optional scoping
            grupo_empresarial="GRUPO1",
        )
    return task_id  # committed: the worker is notified now


class OutOfStock(Exception):
    pass


def enqueue_rolled_back(conn, client: QueueClient, order_table: str, numero: str) -> int:
    """2. The transaction fails after the insert: the task is rolled back with it."""
    task_id = None
    try:
        with conn.transaction():
            conn.execute(
                f"INSERT INTO {order_table} (numero, status) VALUES (%s, 'faturar')"
                " ON CONFLICT (numero) DO NOTHING",
                (numero,),
            )
            task_id = client.insert_task(
                ORIGEM, DESTINO, "faturar_pedido", numero, {"pedido": numero}
            )
            raise OutOfStock(f"pedido {numero}: sem estoque")  # any error rolls the block back
    except OutOfStock:
        pass
    return task_id  # an id that was never committed: no such row exists


def enqueue_priority(conn, client: QueueClient, numero: str) -> int:
    """3. Higher prioridade runs first among ready tasks (default 50, any int >= 0)."""
    with conn.transaction():
        return client.insert_task(
            ORIGEM, DESTINO, "cancelar_pedido", numero, {"pedido": numero}, prioridade=90
        )


def enqueue_scheduled(conn, client: QueueClient, numero: str, delay: datetime.timedelta) -> int:
    """4. Not before ``data_hora``. An aware datetime is safest; a naive one is read in the session's time zone."""
    quando = datetime.datetime.now(datetime.timezone.utc) + delay
    with conn.transaction():
        return client.insert_task(
            ORIGEM, DESTINO, "lembrar_cliente", numero, {"pedido": numero}, data_hora=quando
        )


def enqueue_bulk(conn, client: QueueClient, numeros: list[str]) -> list[int]:
    """5. Many tasks, one round trip; every item is checked before any SQL is sent."""
    with conn.transaction():
        return client.insert_tasks(
            {
                "origem": ORIGEM,
                "destino": DESTINO,
                "processo": "emitir_nota",
                "chave_externa": numero,
                "payload": {"nota": numero},
            }
            for numero in numeros
        )


def enqueue_once(conn, client: QueueClient, queue_table: str, numero: str) -> tuple[int, bool]:
    """6. Enqueue unless an equivalent task is already pending, scheduled or done.

    Returns (task id, True if it was enqueued now). Check-then-insert is a
    race between two concurrent transactions, so the check runs under a
    transaction-level advisory lock on the task's key.
    """
    task = dict(
        origem=ORIGEM,
        destino=DESTINO,
        processo="recalcular_frete",
        chave_externa=numero,
        payload={"pedido": numero},
    )
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            (f"{queue_table}:{task['processo']}:{numero}",),
        )
        existing = client.list_equivalent_task(
            **task
        )  # status sucesso/pendente/agendada by default
        if existing:
            return existing[0]["id"], False
        return client.insert_task(**task), True


def main() -> int:
    queue_table = check_table_name(
        (os.environ.get("QUEUE_TABLE") or "public.fila_teste").strip(), "QUEUE_TABLE"
    )
    subscriber_table = (os.environ.get("QUEUE_SUBSCRIBER_TABLE") or "").strip() or None
    order_table = order_table_for(queue_table)

    # autocommit=True: nothing is open between the `with conn.transaction()`
    # blocks, so each block is exactly one transaction.
    with psycopg.connect(conninfo_from_env(), autocommit=True, connect_timeout=10) as conn:
        client = QueueClient(conn, queue_table, subscriber_table)
        create_order_table(conn, order_table)

        task_id = enqueue_with_business_write(conn, client, order_table, "1001")
        print(f"1. pedido 1001 and task {task_id} committed together")

        lost_id = enqueue_rolled_back(conn, client, order_table, "1002")
        exists = conn.execute(
            f"SELECT count(*) FROM {queue_table} WHERE id = %s", (lost_id,)
        ).fetchone()[0]
        print(
            f"2. task {lost_id} was rolled back with its transaction: {exists} row(s) with that id"
        )

        print(f"3. high-priority task {enqueue_priority(conn, client, '1003')} (prioridade 90)")

        scheduled_id = enqueue_scheduled(conn, client, "1004", datetime.timedelta(minutes=1))
        print(f"4. task {scheduled_id} scheduled one minute ahead")

        ids = enqueue_bulk(conn, client, [f"NF-{n:04d}" for n in range(1, 101)])
        print(f"5. {len(ids)} tasks in one round trip: ids {ids[0]}..{ids[-1]}")

        first, created = enqueue_once(conn, client, queue_table, "1005")
        again, created_again = enqueue_once(conn, client, queue_table, "1005")
        print(
            f"6. task {first} enqueued={created}; the same task again: task {again} enqueued={created_again}"
        )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (psycopg.Error, ValueError) as exc:
        print(f"enqueue.py: {type(exc).__name__}: {str(exc).strip()}", file=sys.stderr)
        sys.exit(1)
