"""``nsj_queue_lib.testing.InMemoryQueue``: the library's routing and retry logic, no database."""

from __future__ import annotations

import asyncio
import datetime
import importlib.util
import json
import random
from pathlib import Path

import pytest

from nsj_queue_lib import (
    PermanentError,
    QueueClient,
    Subscriber,
    Task,
    WorkerBase,
    WorkerPubSubBase,
    current_task,
)
from nsj_queue_lib.exceptions import NotFoundError
from nsj_queue_lib.retry_policy import RetryPolicy
from nsj_queue_lib.task import EXPONENTIAL
from nsj_queue_lib.testing import InMemoryQueue

UTC = datetime.timezone.utc
START = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def enqueue(queue: InMemoryQueue, processo: str, payload="x", **kwargs) -> int:
    client = QueueClient(queue.connection(), "public.fila")
    return client.insert_task("teste", "worker", processo, "chave", payload, **kwargs)


class Orders(WorkerBase):
    seen: list[tuple[str, str, int]]

    def __init__(self) -> None:
        super().__init__()
        self.seen = []

    @Task("faturar", max_retry=3, retry_base_s=30)
    def faturar(self, payload, tarefa, bd_conn):
        self.seen.append(("faturar", payload, tarefa["tentativa"]))
        if json.loads(payload).get("falhar"):
            raise RuntimeError("erp offline")
        QueueClient(bd_conn, "public.fila").insert_task("w", "w", "notificar", "k", payload)
        return "faturado"

    @Task("recusar")
    def recusar(self, payload, tarefa, bd_conn):
        raise PermanentError("pedido inválido")

    def execute(self, payload, tarefa, bd_conn):
        self.seen.append((tarefa["processo"], payload, tarefa["tentativa"]))

    def execute_dead(self, payload, tarefa, bd_conn):
        self.seen.append(("dead", tarefa["processo"], tarefa["live_id"]))
        return "dead handled"


def test_a_task_enqueued_with_queue_client_runs_through_the_workers_routing():
    queue = InMemoryQueue(now=START)
    worker = Orders()
    task_id = enqueue(queue, "faturar", {"pedido": 1, "a": 2})
    assert queue.run(worker) == 2  # faturar, then the notificar task it enqueued
    assert worker.seen == [
        ("faturar", '{"a":2,"pedido":1}', 1),
        ("notificar", '{"a":2,"pedido":1}', 1),
    ]
    row = queue.task(task_id)
    assert (row["status"], row["mensagem"], row["prioridade"]) == ("sucesso", "faturado", 50)
    assert queue.tasks(processo="notificar")[0]["mensagem"] == "Concluído com sucesso"


def test_retries_follow_the_processos_policy_on_the_virtual_clock_then_dead_letter():
    queue = InMemoryQueue(now=START, max_retry=50, base_interval_retry=60)
    worker = Orders()
    first = enqueue(queue, "faturar", {"falhar": True})
    queue.run(worker)

    attempts = queue.tasks(processo="faturar", dead=False)
    assert [a["tentativa"] for a in attempts] == [1, 2, 3]  # max_retry=3, not the queue's 50
    # Linear, retry_base_s=30: the n-th retry 30 * n s after the failure, not 60 minutes.
    assert [a["data_hora"] - START for a in attempts] == [
        datetime.timedelta(seconds=s) for s in (0, 30, 90)
    ]
    assert [a["status"] for a in attempts] == ["falha"] * 3
    assert (
        attempts[-1]["estouro_tentativas"] and "maximum of 3 attempts" in attempts[-1]["mensagem"]
    )
    assert attempts[1]["id_inicial"] == first and attempts[1]["id_anterior"] == first
    assert attempts[2]["payload"] == '{"falhar":true}'  # read from the first attempt
    [dead] = queue.tasks(dead=True)
    assert (dead["live_id"], dead["status"], dead["mensagem"]) == (first, "sucesso", "dead handled")
    # The failed attempts' follow-up tasks were rolled back with them.
    assert queue.tasks(processo="notificar") == []


def test_a_permanent_error_dead_letters_at_once():
    queue = InMemoryQueue(now=START)
    worker = Orders()
    task_id = enqueue(queue, "recusar")
    queue.run(worker)
    row = queue.task(task_id)
    assert row["mensagem"] == "PermanentError: pedido inválido (permanent error: not retried)"
    assert row["estouro_tentativas"] and not row["reenfileirado"]
    assert worker.seen == [("dead", "recusar", task_id)]


def test_a_processo_without_a_handler_waits_for_a_worker_that_handles_it():
    class Only(WorkerBase):
        @Task("a")
        def a(self, payload, tarefa, bd_conn):
            return "a"

    class Other(WorkerBase):
        @Task("z")
        def z(self, payload, tarefa, bd_conn):
            return "z done"

    queue = InMemoryQueue(now=START)
    task_id = enqueue(queue, "z")
    assert queue.run(Only()) == 0  # not claimed: another deployment's processo
    assert queue.statuses() == {"pendente": 1}
    queue.run(Other())
    assert queue.task(task_id)["mensagem"] == "z done"


def test_a_worker_overriding_execute_claims_every_processo_and_fails_unknown_ones():
    class Routing(WorkerBase):
        @Task("a")
        def a(self, payload, tarefa, bd_conn):
            return "a"

        def execute(self, payload, tarefa, bd_conn):
            return super().execute(payload, tarefa, bd_conn)

    queue = InMemoryQueue(now=START)
    task_id = enqueue(queue, "z")
    queue.run(Routing())
    assert "processos it handles: 'a'" in queue.task(task_id)["mensagem"]
    assert queue.statuses() == {"falha": 1, "sucesso": 1}  # the attempt and its dead letter


def test_exponential_back_off_draws_with_the_given_generator():
    class Flaky(WorkerBase):
        @Task("p", max_retry=4, retry_backoff="exponential", retry_base_s=10, retry_max_s=25)
        def p(self, payload, tarefa, bd_conn):
            raise RuntimeError("again")

    queue = InMemoryQueue(now=START, rng=random.Random(99))
    enqueue(queue, "p")
    queue.run(Flaky())
    failed = queue.tasks(dead=False)
    delays = [(f["proxima_tentativa"] - f["data_hora"]).total_seconds() for f in failed[:3]]
    expected_rng = random.Random(99)
    policy = RetryPolicy(4, EXPONENTIAL, 10.0, 25.0)
    assert delays == pytest.approx([policy.delay(n, expected_rng) for n in (1, 2, 3)])
    assert all(0 <= d <= cap for d, cap in zip(delays, (10, 20, 25), strict=True))


def test_without_advance_time_only_what_is_due_runs():
    queue = InMemoryQueue(now=START, base_interval_retry=1)
    worker = Orders()
    enqueue(queue, "faturar", {"falhar": True})
    later = enqueue(queue, "outro", data_hora=START + datetime.timedelta(hours=1))
    assert queue.run(worker, advance_time=False) == 1
    assert queue.statuses() == {"falha": 1, "agendada": 1, "pendente": 1}
    queue.advance(30)  # the retry is due 30 s after the failure
    assert queue.run(worker, advance_time=False) == 1
    assert queue.task(later)["status"] == "pendente"
    queue.run(worker)
    assert queue.task(later)["status"] == "sucesso"
    assert queue.now >= START + datetime.timedelta(hours=1)


def test_pub_sub_publications_fan_out_to_subscriber_methods():
    class Index(WorkerPubSubBase):
        @Subscriber("busca")
        def busca(self, payload, subscription, tarefa, bd_conn):
            return f"indexed {payload['publication']} for {subscription['id']}"

    queue = InMemoryQueue(now=START)
    queue.add_subscriber("busca", "produto_alterado")
    queue.add_subscriber("inativo", "produto_alterado", ativo=False)
    client = QueueClient(queue.connection(), "public.fila", "public.fila_subscriber")
    publication = client.insert_task_pub_sub("o", "d", "produto_alterado", "p-1", {"id": 3})
    queue.run(Index())
    assert queue.task(publication)["mensagem"] == "Published to 1 subscriber(s): busca"
    [delivery] = queue.tasks(publication_id=publication)
    assert delivery["subscriber_id"] == "busca" and delivery["status"] == "sucesso"
    assert delivery["mensagem"] == 'indexed {"id":3} for busca'


def test_bad_arguments_are_refused_by_the_real_client_and_nothing_is_written():
    queue = InMemoryQueue(now=START)
    with pytest.raises(ValueError, match="processo"):
        enqueue(queue, "")
    assert queue.tasks() == []


def test_a_handler_that_enqueues_forever_is_stopped():
    class Loop(WorkerBase):
        def execute(self, payload, tarefa, bd_conn):
            QueueClient(bd_conn, "fila").insert_task("o", "d", "again", "k", "x")

    queue = InMemoryQueue(now=START)
    enqueue(queue, "again")
    with pytest.raises(RuntimeError, match="more than 50 attempts"):
        queue.run(Loop(), max_attempts=50)


def test_the_in_memory_connection_runs_no_sql():
    with pytest.raises(TypeError, match="runs no SQL"):
        InMemoryQueue().connection().cursor()


def load_example(stem: str):
    path = Path(__file__).resolve().parents[2] / "examples" / f"{stem}.py"
    spec = importlib.util.spec_from_file_location(f"example_{stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_worker_tasks_example_runs_in_memory_as_its_docstring_says():
    rows = load_example("worker_tasks").demo_in_memory()
    outcome = {
        (r["processo"], r["dead"], r["tentativa"], r["status"]) for r in rows if r["id"] <= 5
    }
    assert outcome == {
        ("nota_emitida", False, 1, "sucesso"),
        ("nota_emitida", False, 1, "falha"),
        ("pix_pago", False, 1, "sucesso"),
        ("relatorio", False, 1, "sucesso"),
    }
    offline = [r for r in rows if r["processo"] == "nota_emitida" and "ERP" in r["mensagem"]]
    assert [r["tentativa"] for r in offline] == [1, 2, 3, 4, 5]
    assert [r["status"] for r in rows if r["dead"]] == ["sucesso", "sucesso"]


class AsyncOrders(WorkerBase):
    @Task("buscar", max_retry=2, retry_base_s=1)
    async def buscar(self, payload, tarefa, bd_conn):
        await asyncio.sleep(0)
        if tarefa["tentativa"] == 1:
            raise RuntimeError("timeout upstream")
        QueueClient(bd_conn, "public.fila").insert_task("w", "w", "notificar", "k", payload)
        return f"buscado {payload}"

    def execute(self, payload, tarefa, bd_conn):
        return "sync"


def test_async_handlers_are_awaited_with_the_same_retries_and_staged_inserts():
    queue = InMemoryQueue(now=START)
    task_id = enqueue(queue, "buscar", "p1")
    assert queue.run(AsyncOrders()) == 3  # the failure, its retry, then notificar
    [first, retry] = queue.tasks(processo="buscar")
    assert first["id"] == task_id and first["status"] == "falha"
    assert "timeout upstream" in first["mensagem"]
    assert (retry["status"], retry["mensagem"]) == ("sucesso", "buscado p1")
    [notificar] = queue.tasks(processo="notificar")
    assert notificar["mensagem"] == "sync"  # routed to the sync execute


def test_the_async_example_runs_in_memory_as_its_docstring_says():
    rows = load_example("worker_async").demo_in_memory()
    assert [(r["status"], r["mensagem"]) for r in rows] == [
        ("sucesso", "PETR4: 42.0"),
        ("sucesso", "VALE3: 42.0"),
    ]


# -- cancel_task and get_task, as on a database ------------------------------------------


class Cancels(WorkerBase):
    """Stands in for the code that cancels a running task from outside (a web request)."""

    def __init__(self, queue: InMemoryQueue) -> None:
        super().__init__()
        self.client = QueueClient(queue.connection(), "public.fila")
        self.trace: list[str] = []

    @Task("pipeline")
    def pipeline(self, payload, tarefa, bd_conn):
        yield (1, 3)
        self.trace.append(self.client.cancel_task(tarefa["id"]))  # returns "processando"
        yield (2, 3)  # TaskCancelled is raised here
        self.trace.append("never")

    @Task("checks")
    def checks(self, payload, tarefa, bd_conn):
        self.client.cancel_task(tarefa["id"])
        current_task().check_cancelled()
        return "never"

    @Task("fails_after")
    def fails_after(self, payload, tarefa, bd_conn):
        self.client.cancel_task(tarefa["id"])
        raise RuntimeError("a failure after the cancel request")

    @Task("ignores", max_retry=3, retry_base_s=60)
    def ignores(self, payload, tarefa, bd_conn):
        if tarefa["tentativa"] == 1:
            raise RuntimeError("first attempt fails")
        return "ran"

    def execute(self, payload, tarefa, bd_conn):
        return "ok"


def test_cancel_task_and_get_task_work_on_an_in_memory_queue():
    queue = InMemoryQueue(now=START)
    worker = Cancels(queue)
    client = worker.client
    waiting = enqueue(queue, "other")
    assert client.cancel_task(waiting) == "cancelada"  # never runs
    running = {p: enqueue(queue, p) for p in ("pipeline", "checks", "fails_after")}
    done = enqueue(queue, "other")
    retried = enqueue(queue, "ignores")
    queue.run(worker, advance_time=False)  # the retry of "ignores" waits a minute
    assert worker.trace == ["processando"]
    for task_id in running.values():
        row = queue.task(task_id)
        assert (row["status"], row["cancel_requested"]) == ("cancelada", True), row
    assert queue.task(running["pipeline"])["progress_done"] == 2
    assert client.cancel_task(done) == "sucesso"  # finished: left as it is
    # A scheduled retry: get_task follows the task to its latest attempt, cancel_task too.
    view = client.get_task(retried)
    assert (view["status"], view["tentativa"], view["cancel_requested"]) == ("agendada", 2, False)
    assert client.cancel_task(retried) == "cancelada"
    assert queue.run(worker) == 0
    assert client.get_task(retried)["status"] == "cancelada"
    assert client.get_task(waiting) == {
        "id_inicial": waiting,
        "id": waiting,
        "status": "cancelada",
        "tentativa": 1,
        "mensagem": "cancelled before it ran (QueueClient.cancel_task)",
        "cancel_requested": True,
        "progress": None,
    }
    assert client.get_task(10_000) is None
    with pytest.raises(NotFoundError):
        client.cancel_task(10_000)


# -- periodic processos: a slot on demand ----------------------------------------------


class Periodic(WorkerBase):
    @Task("tick", cron="*/5 * * * *", cron_payload={"tenant": 7})
    def tick(self, payload, tarefa, bd_conn):
        return f"slot {json.loads(payload)['slot']}"

    @Task("often", every_s=30)
    def often(self, payload, tarefa, bd_conn):
        return "often"

    def execute(self, payload, tarefa, bd_conn):
        return "ok"


def test_enqueue_slot_enqueues_a_periodic_processos_slot_once():
    queue = InMemoryQueue(now=START + datetime.timedelta(minutes=7, seconds=13))
    worker = Periodic()
    first = queue.enqueue_slot(worker, "tick")  # the slot due now: 12:05
    assert queue.enqueue_slot(worker, "tick") is None  # once per slot
    queue.advance(3 * 60)  # 12:10:13
    second = queue.enqueue_slot(worker, "tick")
    # An explicit moment is taken to its slot; an earlier slot than the latest: none.
    assert queue.enqueue_slot(worker, "tick", START) is None
    often = queue.enqueue_slot(worker, "often", datetime.datetime(2026, 3, 1, 13, 0, 45))
    assert queue.run(worker) == 3
    rows = [queue.task(task_id) for task_id in (first, second, often)]
    assert [r["chave_externa"] for r in rows] == [
        "2026-03-01T12:05:00+00:00",
        "2026-03-01T12:10:00+00:00",
        "2026-03-01T13:00:30+00:00",
    ]
    assert json.loads(rows[0]["payload"]) == {"tenant": 7, "slot": "2026-03-01T12:05:00+00:00"}
    assert (rows[0]["origem"], rows[0]["processo"]) == ("nsj_queue_lib.periodic", "tick")
    assert rows[1]["mensagem"] == "slot 2026-03-01T12:10:00+00:00"
    with pytest.raises(ValueError, match="Periodic has no periodic processo 'other'"):
        queue.enqueue_slot(worker, "other")
