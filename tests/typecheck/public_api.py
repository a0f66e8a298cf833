"""The public API used as a user would, type-checked by ``make typecheck``.

Never run: mypy checks that these calls and subclasses type-check strictly, so
that a change to a public signature shows up as a type error here.
"""

from __future__ import annotations

import datetime
from typing import Any

import psycopg
import psycopg2
import pymysql

from nsj_queue_lib import (
    ConfigError,
    DeadSubscriber,
    PermanentError,
    QueueClient,
    Settings,
    Subscriber,
    Task,
    TaskCancelled,
    TaskContext,
    WorkerBase,
    WorkerGroup,
    WorkerPubSubBase,
    WorkerWebhook,
    current_task,
    run_workers,
)
from nsj_queue_lib.dbapi import DBConnection
from nsj_queue_lib.task import TaskOptions


def enqueue_on_each_driver() -> list[int]:
    ids: list[int] = []
    connections: list[DBConnection] = [
        psycopg.connect("dbname=test"),
        psycopg2.connect("dbname=test"),
        pymysql.connect(host="127.0.0.1", user="root", database="test"),
    ]
    for conn in connections:
        client = QueueClient(conn, "public.fila_teste", "public.fila_teste_subscriber")
        ids.append(
            client.insert_task(
                "origem",
                "destino",
                "processo",
                "chave",
                {"a": 1},
                tenant=1,
                grupo_empresarial="g",
                data_hora=datetime.datetime.now(datetime.timezone.utc),
                prioridade=2,
            )
        )
        ids.append(client.insert_task_pub_sub("o", "d", "p", "k", "text payload"))
        ids.append(client.insert_task_webhook("o", "d", "p", "k", ["list", "payload"]))
        ids.extend(
            client.insert_tasks(
                [
                    {
                        "origem": "o",
                        "destino": "d",
                        "processo": "p",
                        "chave_externa": "k",
                        "payload": {},
                    }
                ]
            )
        )
        found: list[dict[str, Any]] = client.list_equivalent_task(
            "o", "d", "p", "k", {"a": 1}, status=("pendente",)
        )
        ids.extend(int(row["id"]) for row in found)
        conn.commit()
    return ids


class PlainWorker(WorkerBase):
    def execute(self, payload: str, tarefa: dict[str, Any], bd_conn: DBConnection) -> str | None:
        with bd_conn.cursor() as cur:
            cur.execute("select 1")
        return f"done {tarefa['id']}: {len(payload)}"

    def execute_dead(
        self, payload: str, tarefa: dict[str, Any], bd_conn: DBConnection
    ) -> str | None:
        return None


class RoutingWorker(WorkerBase):
    @Task("nota_emitida", max_retry=5, retry_backoff="exponential", retry_base_s=2.0)
    def on_nota(self, payload: str, tarefa: dict[str, Any], bd_conn: DBConnection) -> str:
        if not payload:
            raise PermanentError("empty payload")
        return "ok"

    @Task("boleto_pago", retry_max_s=600, timeout_s=30)
    @Task("pix_pago")
    def on_payment(self, payload: str, tarefa: dict[str, Any], bd_conn: DBConnection) -> str | None:
        return None


class AsyncWorker(WorkerBase):
    @Task("fetch")
    async def fetch(self, payload: str, tarefa: dict[str, Any], bd_conn: Any) -> str:
        await bd_conn.execute("select 1")
        return "fetched"

    async def execute(self, payload: str, tarefa: dict[str, Any], bd_conn: Any) -> str | None:
        return None


def run_several_queues(first: Settings, second: Settings) -> int:
    group = WorkerGroup([AsyncWorker(first), RoutingWorker(second)])
    code: int = group.run_until_stopped(install_signal_handlers=False)
    run_workers([AsyncWorker(first)])
    return code


def declared_timeout() -> float | None:
    options: TaskOptions = RoutingWorker.task_options("boleto_pago")
    return options.timeout_s


Row = dict[str, Any]  # a delivery's envelope, its subscription, the task row


class PubSubWorker(WorkerPubSubBase):
    @Subscriber("index")
    def index(self, payload: Row, subscription: Row, tarefa: Row, bd_conn: DBConnection) -> str:
        return str(payload["publication"])

    @DeadSubscriber("index")
    def index_dead(
        self, payload: Row, subscription: Row, tarefa: Row, bd_conn: DBConnection
    ) -> str:
        return "gave up"


def run_worker_instances() -> int:
    try:
        settings = Settings.from_env({"DB_HOST": "127.0.0.1", "QUEUE_NAME": "fila_teste"})
    except ConfigError as exc:
        problems: dict[str, str] = exc.problems
        return len(problems)
    settings = settings.with_changes(queue_concurrency=2)
    code: int = PlainWorker(settings).run_until_stopped(install_signal_handlers=False)
    PubSubWorker(settings).stop()
    WorkerWebhook(settings).run()
    return code


def task_life_cycle(conn: DBConnection) -> tuple[str, int, bool]:
    client = QueueClient(conn, "public.fila_teste")
    view: dict[str, Any] | None = client.get_task(1)
    status: str = client.cancel_task(1)
    new_id: int = client.retry_task(1)
    return status, new_id, view is None


class ReportingWorker(WorkerBase):
    def execute(self, payload: str, tarefa: dict[str, Any], bd_conn: DBConnection) -> str | None:
        task: TaskContext = current_task()
        task.report_progress(1, 10, "one")
        task.report_progress(2)
        try:
            task.check_cancelled()
        except TaskCancelled:
            raise
        return f"{task.id} {task.cancel_requested}"
