"""``@Task`` routing, per-processo retry policies, ``PermanentError`` and the webhook's permanent
failures and ``Retry-After``, on real databases (CONTRACT.md section 7).

Workers run in this process (``backend.run``) on PostgreSQL and MariaDB; the
``PermanentError`` test runs over every backend, the socket-server ones
included. Tests wait on the queue table with deadlines, never a blind sleep.
"""

from __future__ import annotations

import os
import time

import pytest

from nsj_queue_lib import PermanentError, Task, WorkerBase, WorkerWebhook, current_task
from tests.contract.backends import seconds
from tests.helpers.http_server import RecordingServer
from tests.helpers.processes import wait_for
from tests.helpers.worker_harness import Calls

pytestmark = pytest.mark.timeout(120)

ON_DATABASES = pytest.mark.parametrize(
    "backend", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True
)
PROCESSO = "pedido_criado"
RETRY_BASE_MINUTES = 0.125 / 60  # the queue's default retry: n * 0.125 s


def write_exec(backend, bd_conn, tarefa, chave: str) -> None:
    backend.execute(
        f"INSERT INTO {backend.exec_table} (task_id, chave, pid) VALUES (%s, %s, %s)",
        (tarefa["id"], chave, os.getpid()),
        conn=bd_conn,
    )


def routing_worker(backend, calls: Calls) -> type[WorkerBase]:
    class RoutingWorker(WorkerBase):
        @Task("cobrar")
        def charge(self, payload, tarefa, bd_conn):
            calls.add(handler="charge", id=tarefa["id"])
            write_exec(backend, bd_conn, tarefa, "cobrar")
            return "charged"

        @Task("instavel", max_retry=2, retry_base_s=0.2)
        def unstable(self, payload, tarefa, bd_conn):
            calls.add(handler="unstable", id=tarefa["id"])
            write_exec(backend, bd_conn, tarefa, "instavel")
            raise RuntimeError(f"unstable attempt {tarefa['tentativa']}")

        def execute_dead(self, payload, tarefa, bd_conn):
            calls.add(handler="dead", id=tarefa["id"], processo=tarefa["processo"])
            return f"dead letter of {tarefa['processo']}"

    return RoutingWorker


@ON_DATABASES
def test_tasks_are_routed_by_processo_each_with_its_own_max_retry(backend):
    calls = Calls()
    worker_class = routing_worker(backend, calls)
    # The queue's own policy would wait ten minutes and allow 100 attempts.
    worker = backend.run(
        worker_class(backend.settings(queue_max_retry=100, queue_base_interval_retry=10.0))
    )
    charge, unstable, unknown = backend.enqueue(
        [dict(processo="cobrar"), dict(processo="instavel"), dict(processo="desconhecido")]
    )
    wait_for(
        lambda: len(backend.rows("dead = %s AND status = %s", (True, "sucesso"))) == 1,
        10,
        "instavel's dead letter (after 2 attempts) to be handled",
    )
    assert worker.stop() == 0

    assert backend.row(charge)["status"] == "sucesso"
    assert backend.row(charge)["mensagem"] == "charged"
    # instavel: two attempts (its max_retry), the retry 0.2 s after the failure, not 10 min.
    first, second = backend.rows("(id = %s OR id_inicial = %s) AND NOT dead", (unstable, unstable))
    assert (first["tentativa"], second["tentativa"]) == (1, 2)
    assert [first["estouro_tentativas"], second["estouro_tentativas"]] == [False, True]
    assert "maximum of 2 attempts" in second["mensagem"]
    assert 0 < seconds(second["data_hora"] - first["data_hora"]) < 5
    # desconhecido: no @Task method and no execute(): never claimed by this worker (issue 37:
    # another deployment's processo), it waits.
    [waiting] = backend.rows("id = %s OR id_inicial = %s", (unknown, unknown))
    assert (waiting["status"], waiting["tentativa"], waiting["mensagem"]) == ("pendente", 1, None)
    dead_of = {c["processo"] for c in calls.list() if c["handler"] == "dead"}
    assert dead_of == {"instavel"}
    assert [c["handler"] for c in calls.list()].count("unstable") == 2
    # Only the successful handler's write committed.
    assert [(r["task_id"], r["chave"]) for r in backend.exec_rows()] == [(charge, "cobrar")]


@ON_DATABASES
def test_exponential_backoff_draws_each_delay_between_zero_and_its_cap(backend):
    handled_at: dict[int, object] = {}

    class Backoff(WorkerBase):
        @Task("exp", max_retry=2, retry_backoff="exponential", retry_base_s=2.0, retry_max_s=60)
        def exp(self, payload, tarefa, bd_conn):
            if tarefa["tentativa"] == 1:
                handled_at[tarefa["id"]] = backend.now(conn=bd_conn)
                raise RuntimeError("try again later")
            return "second attempt"

    worker = backend.run(Backoff(backend.settings(queue_concurrency=4)))
    ids = backend.enqueue([dict(processo="exp", chave_externa=str(n)) for n in range(20)])
    wait_for(
        lambda: len(backend.rows("tentativa = 1 AND status = %s", ("falha",))) == 20,
        15,
        "20 first attempts to fail",
    )
    delays = []
    for task_id in ids:
        failed = backend.row(task_id)
        # The failure is recorded just after the handler read the clock: proxima_tentativa
        # is at least that instant (delay >= 0) and at most the cap (2 s) later, plus the
        # few milliseconds between the two.
        delays.append(seconds(failed["proxima_tentativa"] - handled_at[task_id]))
    assert all(0 <= d <= 2.0 + 0.3 for d in delays), delays
    # Full jitter spreads them (a linear policy would give 2.0 for each).
    assert max(delays) - min(delays) > 0.5, delays
    wait_for(
        lambda: backend.statuses() == {"falha": 20, "sucesso": 20},
        10,
        "every second attempt (due within 2 s) to succeed",
    )
    assert worker.stop() == 0


@pytest.mark.parametrize(
    "backend",
    [
        "postgres",
        "postgres-via-server",
        pytest.param("mysql", marks=pytest.mark.mysql),
        pytest.param("singlestore-via-server", marks=pytest.mark.mysql),
    ],
    indirect=True,
)
def test_a_permanent_error_is_not_retried_and_its_dead_letter_follows_at_once(backend):
    calls = Calls()

    class Customers(WorkerBase):
        def execute(self, payload, tarefa, bd_conn):
            write_exec(backend, bd_conn, tarefa, "live")
            raise PermanentError("cliente 42 não existe")

        def execute_dead(self, payload, tarefa, bd_conn):
            calls.add(live_id=tarefa["live_id"], payload=payload)
            write_exec(backend, bd_conn, tarefa, "dead")
            return "noted"

    worker = backend.run(Customers(backend.settings(queue_max_retry=5)))
    [task_id] = backend.enqueue([dict(payload='{"cliente": 42}')])
    backend.wait_statuses({"falha": 1, "sucesso": 1}, 10, "the attempt and its dead letter")
    assert worker.stop() == 0

    failed = backend.row(task_id)
    [dead] = backend.rows("dead = %s", (True,))
    assert failed["mensagem"] == (
        "PermanentError: cliente 42 não existe (permanent error: not retried)"
    )
    assert failed["tentativa"] == 1 and failed["estouro_tentativas"] is True
    assert failed["reenfileirado"] is False and failed["proxima_tentativa"] is None
    assert dead["live_id"] == task_id and dead["status"] == "sucesso"
    assert calls.list() == [dict(live_id=task_id, payload='{"cliente": 42}')]
    assert [r["chave"] for r in backend.exec_rows()] == ["dead"]  # the failed write rolled back


@ON_DATABASES
def test_webhook_4xx_is_permanent_408_is_retried_and_429_retry_after_is_honoured(backend):
    with RecordingServer() as server:
        server.route("/gone", statuses=[404])
        server.route("/busy", statuses=[408, 200])
        server.route("/throttled", statuses=[429, 200], headers={"Retry-After": "1"})
        for name in ("gone", "busy", "throttled"):
            backend.add_subscriber(name, PROCESSO, url=server.url(f"/{name}"), http_method="POST")
        with backend.transaction() as conn:
            backend.client(conn).insert_task_webhook("vendas", "hooks", PROCESSO, "p-1", {"p": 1})
        worker = backend.run(
            WorkerWebhook(
                backend.settings(queue_max_retry=5, queue_base_interval_retry=RETRY_BASE_MINUTES)
            )
        )

        def settled() -> bool:
            done = backend.rows("status = %s AND subscriber_id IS NOT NULL", ("sucesso",))
            return {(r["subscriber_id"], r["dead"]) for r in done} == {
                ("busy", False),
                ("throttled", False),
                ("gone", True),
            }

        wait_for(settled, 15, "busy and throttled delivered, gone dead-lettered")
        assert worker.stop() == 0
        arrivals = {
            n: [r.received_at for r in server.requests_to(f"/{n}")]
            for n in ("gone", "busy", "throttled")
        }

    gone = backend.rows("subscriber_id = %s AND NOT dead", ("gone",))
    assert [(r["tentativa"], r["status"], r["estouro_tentativas"]) for r in gone] == [
        (1, "falha", True)
    ]
    assert "HTTP 404" in gone[0]["mensagem"] and "permanent error" in gone[0]["mensagem"]
    assert len(arrivals["gone"]) == 1
    busy = backend.rows("subscriber_id = %s", ("busy",))
    assert [(r["tentativa"], r["status"]) for r in busy] == [(1, "falha"), (2, "sucesso")]
    # The queue's policy would retry 0.125 s later; the server asked for 1 s.
    throttled = backend.rows("subscriber_id = %s", ("throttled",))
    assert [(r["tentativa"], r["status"]) for r in throttled] == [(1, "falha"), (2, "sucesso")]
    assert "HTTP 429" in throttled[0]["mensagem"]
    first, second = arrivals["throttled"]
    assert 1.0 <= second - first < 3.0
    assert seconds(throttled[1]["data_hora"] - throttled[0]["data_hora"]) >= 1.0


@ON_DATABASES
def test_timeout_s_applies_to_its_processo_only(backend):
    class TimedWorker(WorkerBase):
        @Task("lento", timeout_s=0.5, retry_base_s=0.2)
        def slow(self, payload, tarefa, bd_conn):
            write_exec(backend, bd_conn, tarefa, "lento")
            if tarefa["tentativa"] == 1:
                while True:  # cooperative: stops when its timeout asks it to
                    current_task().check_cancelled()
                    time.sleep(0.02)
            return "second attempt in time"

        def execute(self, payload, tarefa, bd_conn):
            time.sleep(1.0)  # longer than lento's limit: no limit applies here
            return "no limit"

    worker = backend.run(TimedWorker(backend.settings(queue_concurrency=2)))
    slow, other = backend.enqueue([dict(processo="lento"), dict(processo="outro")])
    wait_for(
        lambda: backend.statuses() == {"falha": 1, "sucesso": 2}, 15, "the timeout and its retry"
    )
    assert worker.stop() == 0
    assert backend.row(slow)["mensagem"].startswith("timeout"), backend.row(slow)["mensagem"]
    assert backend.row(other)["mensagem"] == "no limit"
    retried = backend.rows("id_inicial = %s AND status = %s", (slow, "sucesso"))
    assert [r["mensagem"] for r in retried] == ["second attempt in time"]
