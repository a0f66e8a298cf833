"""The queue's contract (CONTRACT.md sections 3 and 4), one suite run on every backend.

Every test takes the ``backend`` fixture (tests/contract/conftest.py) and so
runs on PostgreSQL (LISTEN + advisory locks), PostgreSQL through the socket
server, MariaDB (polling + GET_LOCK) and the SingleStore dialect on MariaDB
through the socket server. Tests observe the queue table and the handlers'
side tables from an outside autocommit connection and wait on them with
deadlines, never on a blind sleep.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import time

import pytest

from nsj_queue_lib import DeadSubscriber
from nsj_queue_lib.runtime.retry import ORPHAN_MESSAGE
from nsj_queue_lib.worker_webhook import WorkerWebhook
from tests.contract.backends import seconds
from tests.helpers.http_server import RecordingServer
from tests.helpers.processes import ready_tasks, wait_for
from tests.helpers.worker_harness import Calls, FanOutWorker

pytestmark = pytest.mark.timeout(120)

PROCESSO = "pedido_criado"
# QUEUE_BASE_INTERVAL_RETRY of the retry tests: the n-th retry is due n * 0.125 s after its
# failure, off the 0.1 s polling grid.
RETRY_BASE_MINUTES = 0.125 / 60


def write_exec(backend, bd_conn, tarefa, chave=None) -> None:
    """The handler's business write, in the task's transaction."""
    backend.execute(
        f"INSERT INTO {backend.exec_table} (task_id, chave, pid) VALUES (%s, %s, %s)",
        (tarefa["id"], chave if chave is not None else tarefa["chave_externa"], os.getpid()),
        conn=bd_conn,
    )


def in_transaction(backend, bd_conn) -> bool:
    if backend.family == "postgres":
        return bd_conn.info.transaction_status.name == "INTRANS"
    return bool(backend.value("SELECT @@in_transaction", conn=bd_conn))


# -- enqueue ----------------------------------------------------------------------------------


def test_enqueue_returns_the_id_and_fills_the_defaults(backend):
    before = backend.now()
    with backend.transaction() as conn:
        client = backend.client(conn)
        task_id = client.insert_task(
            "vendas", "estoque", "baixar", "pedido-1", {"pedido": 1, "texto": "ação"}
        )
        bulk_ids = client.insert_tasks(
            [
                dict(
                    origem="o",
                    destino="d",
                    processo="p",
                    chave_externa=f"k{i}",
                    payload=f"p{i}",
                    prioridade=i,
                )
                for i in range(5)
            ]
        )
    after = backend.now()
    # A task exists only once the caller's transaction commits.
    with backend.transaction() as conn:
        backend.client(conn).insert_task("o", "d", "p", "rolled-back", "x")
        conn.rollback()

    row = backend.row(task_id)
    assert isinstance(task_id, int) and row["id"] == task_id
    assert (row["origem"], row["destino"], row["processo"], row["chave_externa"]) == (
        "vendas",
        "estoque",
        "baixar",
        "pedido-1",
    )
    assert json.loads(row["payload"]) == {"pedido": 1, "texto": "ação"}
    assert row["payload_hash"] is not None
    assert (row["status"], row["tentativa"], row["prioridade"]) == ("pendente", 1, 50)
    assert (row["reenfileirado"], row["estouro_tentativas"], row["pub_sub"], row["dead"]) == (
        False,
        False,
        False,
        False,
    )
    for column in (
        "id_inicial",
        "id_anterior",
        "proxima_tentativa",
        "mensagem",
        "publication_id",
        "subscriber_id",
        "live_id",
        "tenant",
        "grupo_empresarial",
    ):
        assert row[column] is None, column
    assert before <= row["data_hora"] <= after
    assert row["data_hora_inicial"] == row["data_hora"]

    assert bulk_ids == sorted(bulk_ids) and len(set(bulk_ids)) == 5 and bulk_ids[0] > task_id
    bulk_rows = backend.rows("id IN (%s, %s, %s, %s, %s)", tuple(bulk_ids))
    assert [(r["id"], r["chave_externa"], r["payload"], r["prioridade"]) for r in bulk_rows] == [
        (bulk_ids[i], f"k{i}", f"p{i}", i) for i in range(5)
    ]
    assert backend.rows("chave_externa = %s", ("rolled-back",)) == []


# -- claim, complete, fail ----------------------------------------------------------------------


def test_claim_and_complete_commit_the_handlers_write_with_sucesso(backend):
    seen = {}

    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)
        seen["in_transaction"] = in_transaction(backend, bd_conn)
        outside = backend.connect(autocommit=True)  # sees committed rows only
        try:
            seen["exec_rows"] = backend.value(
                f"SELECT count(*) FROM {backend.exec_table}", conn=outside
            )
            seen["status"] = backend.value(
                f"SELECT status FROM {backend.table} WHERE id = %s", (tarefa["id"],), conn=outside
            )
        finally:
            outside.close()
        seen["tarefa"] = dict(tarefa)
        return f"ok {payload}"

    worker = backend.run(backend.function_worker(execute))
    [task_id] = backend.enqueue([dict(payload="hello", chave_externa="k1")])
    backend.wait_statuses({"sucesso": 1}, 10, "the task to succeed")

    # While the handler ran, the task was 'processando' and its write not committed.
    assert (seen["in_transaction"], seen["exec_rows"], seen["status"]) == (True, 0, "processando")
    assert seen["tarefa"]["id"] == task_id and seen["tarefa"]["payload"] == "hello"
    assert seen["tarefa"]["tentativa"] == 1 and seen["tarefa"]["status"] == "processando"
    row = backend.row(task_id)
    assert (row["status"], row["mensagem"], row["tentativa"]) == ("sucesso", "ok hello", 1)
    assert (row["reenfileirado"], row["estouro_tentativas"], row["proxima_tentativa"]) == (
        False,
        False,
        None,
    )
    assert [(r["task_id"], r["chave"]) for r in backend.exec_rows()] == [(task_id, "k1")]
    assert worker.stop() == 0


def test_handlers_run_at_the_databases_default_isolation_level(backend):
    """PostgreSQL's READ COMMITTED; MySQL's REPEATABLE READ (what nsj-queue-lib 1.2.2 handlers got too)."""
    seen = []

    def execute(payload, tarefa, bd_conn):
        query = (
            "SHOW transaction_isolation"
            if backend.family == "postgres"
            else "SELECT @@session.tx_isolation"
        )
        seen.append(backend.value(query, conn=bd_conn))

    worker = backend.run(backend.function_worker(execute))
    backend.enqueue(
        [dict(payload="a"), dict(payload="b")]
    )  # the first claim, then one after a completion
    backend.wait_statuses({"sucesso": 2}, 10, "both tasks to succeed")
    assert seen == (
        ["read committed"] * 2 if backend.family == "postgres" else ["REPEATABLE-READ"] * 2
    )
    assert worker.stop() == 0


def test_a_failure_rolls_back_and_schedules_the_next_attempt(backend):
    base_minutes = 10.0  # the retry stays 'agendada' for the rest of the test
    failed_at = []

    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)  # must roll back
        failed_at.append(backend.now(conn=bd_conn))
        raise RuntimeError(f"boom {tarefa['tentativa']}")

    # One commit per task (the executor's rollback); a group's savepoint rollback is
    # test_group_commit's.
    worker = backend.run(
        backend.function_worker(execute, queue_base_interval_retry=base_minutes, queue_batch_size=1)
    )
    [first_id] = backend.enqueue([dict(payload="p", chave_externa="chain", prioridade=70)])
    backend.wait_statuses(
        {"falha": 1, "agendada": 1}, 10, "the attempt to fail and the retry to be scheduled"
    )

    failed, retry = backend.rows()
    assert failed["id"] == first_id and failed["status"] == "falha"
    assert "RuntimeError" in failed["mensagem"] and "boom 1" in failed["mensagem"]
    assert failed["reenfileirado"] is True and failed["estouro_tentativas"] is False
    assert failed["proxima_tentativa"] == retry["data_hora"]
    # Due at the failure time plus tentativa * QUEUE_BASE_INTERVAL_RETRY minutes.
    delay = seconds(retry["data_hora"] - failed_at[0])
    assert base_minutes * 60 <= delay <= base_minutes * 60 + 1.0, delay
    assert retry["status"] == "agendada" and retry["tentativa"] == 2
    assert retry["id_inicial"] == first_id and retry["id_anterior"] == first_id
    assert retry["data_hora_anterior"] == failed["data_hora"]
    assert retry["status_anterior"] == "falha" and retry["mensagem_anterior"] == failed["mensagem"]
    assert retry["data_hora_inicial"] == failed["data_hora_inicial"]
    assert retry["payload"] is None  # later attempts read the first attempt's payload
    for column in (
        "origem",
        "destino",
        "processo",
        "chave_externa",
        "prioridade",
        "payload_hash",
        "dead",
    ):
        assert retry[column] == failed[column], column
    assert backend.exec_rows() == []  # nothing the failed handler wrote was committed
    assert len(failed_at) == 1  # not run again before its time
    assert worker.alive() and worker.stop() == 0


def test_dead_letter_after_queue_max_retry(backend):
    calls, dead_calls = Calls(), Calls()

    def execute(payload, tarefa, bd_conn):
        calls.add(id=tarefa["id"], tentativa=tarefa["tentativa"], payload=payload)
        write_exec(backend, bd_conn, tarefa)
        raise RuntimeError(f"boom {tarefa['tentativa']}")

    def execute_dead(payload, tarefa, bd_conn):
        dead_calls.add(
            payload=payload, dead=tarefa["dead"], live_id=tarefa["live_id"], id=tarefa["id"]
        )
        write_exec(backend, bd_conn, tarefa, chave="dead")
        return "dead handled"

    worker = backend.run(
        backend.function_worker(
            execute, execute_dead, queue_max_retry=3, queue_base_interval_retry=RETRY_BASE_MINUTES
        )
    )
    [first_id] = backend.enqueue([dict(payload='{"n": 1}', chave_externa="chain")])
    # Retries 0.125 s and 0.25 s after the failures: well under a second when they run.
    wait_for(
        lambda: len(backend.rows("dead = %s AND status = %s", (True, "sucesso"))) == 1,
        6,
        "the dead-letter task to be handled",
    )

    rows = backend.rows()
    attempts = [r for r in rows if not r["dead"]]
    [dead] = [r for r in rows if r["dead"]]
    assert len(rows) == 4  # three attempts and the dead letter, nothing after it
    assert [r["tentativa"] for r in attempts] == [1, 2, 3]
    assert [c["tentativa"] for c in calls.list()] == [1, 2, 3]
    assert [c["payload"] for c in calls.list()] == ['{"n": 1}'] * 3
    assert all(r["status"] == "falha" for r in attempts)
    assert [r["estouro_tentativas"] for r in attempts] == [False, False, True]
    assert [r["reenfileirado"] for r in attempts] == [True, True, False]
    assert "maximum of 3 attempts" in attempts[-1]["mensagem"]
    assert attempts[-1]["proxima_tentativa"] is None
    assert dead["live_id"] == first_id and dead["tentativa"] == 1 and dead["dead"] is True
    assert dead["status"] == "sucesso" and dead["mensagem"] == "dead handled"
    assert dead_calls.list() == [
        dict(payload='{"n": 1}', dead=True, live_id=first_id, id=dead["id"])
    ]
    # Only the dead-letter handler's write committed.
    assert [(r["task_id"], r["chave"]) for r in backend.exec_rows()] == [(dead["id"], "dead")]
    assert worker.stop() == 0


# -- order and time -------------------------------------------------------------------------------


def test_ready_tasks_run_by_priority_then_age(backend):
    backend.enqueue(ready_tasks(backend.now()))
    order = []
    # Started after the inserts: it claims what is ready without any wake-up.
    worker = backend.run(
        backend.function_worker(
            lambda payload, tarefa, conn: order.append(payload),
            queue_concurrency=1,
            # Groups of two: which two a claim takes is the claim's order, not the sort of
            # what it took.
            queue_batch_size=2,
        )
    )
    backend.wait_statuses({"sucesso": 6}, 10, "all six tasks to succeed")
    assert order == ["E", "C", "B", "F", "A", "D"]
    assert worker.stop() == 0


def test_a_task_never_runs_before_its_data_hora_and_runs_when_due(backend):
    started = Calls()

    def execute(payload, tarefa, bd_conn):
        started.add(payload=payload, at=backend.now(conn=bd_conn))

    worker = backend.run(backend.function_worker(execute, queue_wait_notify_interval=10))
    due = backend.now() + datetime.timedelta(seconds=1.2)
    backend.enqueue([dict(payload="later", data_hora=due), dict(payload="now")])
    wait_for(lambda: len(started) == 1, 5, "the task due now to run")
    time.sleep(0.3)
    assert [c["payload"] for c in started.list()] == ["now"]
    assert backend.statuses() == {"sucesso": 1, "pendente": 1}
    wait_for(lambda: len(started) == 2, 5, "the scheduled task to run")
    later = started.list()[1]
    assert later["payload"] == "later"
    assert later["at"] >= due
    assert seconds(later["at"] - due) < 0.8, "the worker should run the task soon after it is due"
    assert worker.stop() == 0


# -- crash recovery -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_kill_9_mid_task_is_rescued_by_another_workers_retry_service_and_retried(backend):
    """A worker process killed mid-task: another worker's retry service settles the attempt as
    'falha_processando' and enqueues the next one, which the same worker runs when it is due
    and which succeeds; nothing is lost or run twice.
    """
    victim = backend.start_process("victim")
    [task_id] = backend.enqueue(
        [
            dict(
                payload=json.dumps({"sleep": 60, "sleep_on": [1], "started": True}),
                chave_externa="crash",
            )
        ]
    )
    wait_for(lambda: backend.started_ids() == [task_id], 15, "the victim to start the task")
    assert backend.row(task_id)["status"] == "processando"
    victim.kill9()

    # Another worker's retry service finds the attempt without a live worker.
    rescuer = backend.run(
        backend.contract_worker(
            queue_retry_thread_interval=0.3, queue_base_interval_retry=RETRY_BASE_MINUTES
        )
    )
    wait_for(
        lambda: backend.statuses().get("falha_processando") == 1,
        15,
        "the abandoned attempt to be rescued",
    )
    first = backend.row(task_id)
    [retry] = backend.rows("id_anterior = %s", (task_id,))
    assert ORPHAN_MESSAGE in first["mensagem"]
    assert first["reenfileirado"] is True and first["proxima_tentativa"] == retry["data_hora"]
    assert (retry["tentativa"], retry["id_inicial"], retry["status_anterior"]) == (
        2,
        task_id,
        "falha_processando",
    )
    assert seconds(retry["data_hora"] - first["data_hora"]) > 0
    backend.wait_statuses(
        {"falha_processando": 1, "sucesso": 1}, 5, "the retry (due 0.125 s later) to succeed"
    )
    retry = backend.row(retry["id"])
    assert retry["mensagem"] == f"done by {os.getpid()}"
    # The victim's write died with its transaction; the retry's committed: once.
    assert [(r["task_id"], r["pid"]) for r in backend.exec_rows()] == [(retry["id"], os.getpid())]
    assert rescuer.stop() == 0


@pytest.mark.slow
def test_a_task_released_at_shutdown_runs_at_once_on_another_live_worker(backend):
    """SIGTERM with a task still running after the grace period: the attempt is released
    ('falha_processando', next attempt due now) and a worker that is already running takes it."""
    leaving = backend.start_process("leaving", QUEUE_GRACE_PERIOD="0.3")
    [task_id] = backend.enqueue(
        [
            dict(
                payload=json.dumps({"sleep": 60, "sleep_on": [1], "started": True}),
                chave_externa="released",
            )
        ]
    )
    wait_for(lambda: backend.started_ids() == [task_id], 15, "the leaving worker to start the task")
    # Retry service off: only the release and the dispatcher can bring the task back.
    staying = backend.run(backend.contract_worker())
    leaving.send(signal.SIGTERM)
    assert leaving.wait(15) == 0
    first = backend.row(task_id)
    assert first["status"] == "falha_processando" and first["reenfileirado"] is True
    [retry] = backend.rows("id_anterior = %s", (task_id,))
    assert retry["tentativa"] == 2 and retry["data_hora"] == first["proxima_tentativa"]
    # Due at once: it must not wait for QUEUE_WAIT_NOTIFY_INTERVAL (60 s here).
    backend.wait_statuses(
        {"falha_processando": 1, "sucesso": 1}, 3, "the released attempt to run at once"
    )
    assert [(r["task_id"], r["pid"]) for r in backend.exec_rows()] == [(retry["id"], os.getpid())]
    assert staying.stop() == 0


# -- purge ----------------------------------------------------------------------------------------------


def test_purge_deletes_old_settled_rows_only(backend):
    if backend.kind.endswith("-partitioned"):
        pytest.skip("the partitioned layout drops whole days (test_store_partitioned.py)")

    def execute(payload, tarefa, bd_conn):
        if payload == "fail":
            raise RuntimeError("fails once, retried in 10 minutes")
        return "ok"

    # QUEUE_PURGE_MAX_AGE=0: every settled row is old enough. The purge
    # service's own schedule is off (3600 s); the test runs it once.
    worker = backend.run(
        backend.function_worker(execute, queue_purge_max_age=0, queue_base_interval_retry=10)
    )
    done, failed = backend.enqueue([dict(payload="ok"), dict(payload="fail")])
    future = backend.now() + datetime.timedelta(hours=1)
    [waiting] = backend.enqueue([dict(payload="later", data_hora=future)])
    backend.wait_statuses(
        {"sucesso": 1, "falha": 1, "agendada": 1, "pendente": 1},
        10,
        "one success, one failure with its retry scheduled",
    )
    [retry] = backend.rows("id_inicial = %s", (failed,))

    purge = next(s for s in worker.runtime.services if s.name == "purge")
    assert purge.run_once() == 1
    # Gone: the old success. Kept: a pending task, a scheduled retry, and the
    # failed first attempt whose retry still reads its payload.
    assert sorted(r["id"] for r in backend.rows()) == sorted([failed, waiting, retry["id"]])
    assert purge.run_once() == 0
    assert worker.stop() == 0


# -- pub/sub and webhook ----------------------------------------------------------------------------------


class ContractFanOutWorker(FanOutWorker):
    """The fan-out worker on any backend; each handler also writes ``<queue>_exec``."""

    def __init__(self, settings, backend) -> None:
        super().__init__(settings)
        self.backend = backend

    def in_transaction(self, bd_conn) -> bool:
        return in_transaction(self.backend, bd_conn)

    def record(self, handler, payload, subscription, tarefa, bd_conn) -> str:
        write_exec(self.backend, bd_conn, tarefa, chave=handler)
        return super().record(handler, payload, subscription, tarefa, bd_conn)

    @DeadSubscriber("estoque")
    def estoque_dead(self, payload, subscription, tarefa, bd_conn) -> str:
        return self.record("estoque_dead", payload, subscription, tarefa, bd_conn)


def test_pub_sub_fans_out_to_each_subscriber_method(backend):
    backend.add_subscriber("estoque", PROCESSO)
    backend.add_subscriber("financeiro", PROCESSO)
    backend.add_subscriber("inativo", PROCESSO, ativo=False)
    backend.add_subscriber("outro_processo", "pedido_cancelado")
    publication = {"pedido": 42, "itens": ["a", "b"], "texto": "ação"}
    with backend.transaction() as conn:
        publication_id = backend.client(conn).insert_task_pub_sub(
            "vendas", "assinantes", PROCESSO, "pedido-42", publication
        )

    worker = ContractFanOutWorker(backend.settings(queue_concurrency=2), backend)
    running = backend.run(worker)
    backend.wait_statuses({"sucesso": 3}, 15, "the publication and its two deliveries to succeed")

    pub = backend.row(publication_id)
    assert pub["pub_sub"] is True and pub["publication_id"] is None
    deliveries = backend.rows("publication_id = %s", (publication_id,))
    assert sorted(d["subscriber_id"] for d in deliveries) == ["estoque", "financeiro"]
    calls = sorted(worker.calls.list(), key=lambda c: c["handler"])
    assert [c["handler"] for c in calls] == ["estoque", "financeiro"]  # each once, nothing else
    for call in calls:
        delivery = next(d for d in deliveries if d["subscriber_id"] == call["handler"])
        assert delivery["status"] == "sucesso" and delivery["mensagem"] == f"{call['handler']} ok"
        assert (delivery["processo"], delivery["chave_externa"]) == (PROCESSO, "pedido-42")
        envelope = json.loads(delivery["payload"])
        assert call["payload"] == envelope and set(envelope) == {"publication", "subscription"}
        assert json.loads(envelope["publication"]) == publication
        assert call["subscription"]["id"] == call["handler"]
        assert (
            call["tarefa"]["id"] == delivery["id"]
            and call["tarefa"]["publication_id"] == publication_id
        )
        assert call["in_transaction"] is True
    assert sorted((r["task_id"], r["chave"]) for r in backend.exec_rows()) == sorted(
        (d["id"], d["subscriber_id"]) for d in deliveries
    )
    assert running.stop() == 0


def test_webhook_delivers_the_publication_to_the_subscribers_url(backend):
    publication = {"pedido": 7, "texto": "ação"}
    with RecordingServer() as server:
        server.route("/hook", statuses=[500, 200])  # the first delivery fails and is retried
        backend.add_subscriber(
            "hook",
            PROCESSO,
            url=server.url("/hook"),
            http_method="POST",
            headers={"X-Token": "segredo"},
        )
        with backend.transaction() as conn:
            publication_id = backend.client(conn).insert_task_webhook(
                "vendas", "assinantes", PROCESSO, "pedido-7", publication
            )
        running = backend.run(
            WorkerWebhook(backend.settings(queue_base_interval_retry=RETRY_BASE_MINUTES))
        )
        wait_for(
            lambda: (
                len(
                    backend.rows("publication_id = %s AND status = %s", (publication_id, "sucesso"))
                )
                == 1
            ),
            6,
            "the webhook delivery to succeed on its second attempt (due 0.125 s after the first)",
        )
        requests = list(server.requests)
        assert running.stop() == 0

    assert backend.row(publication_id)["status"] == "sucesso"
    first, second = backend.rows("publication_id = %s", (publication_id,))
    assert (first["status"], first["tentativa"], second["status"], second["tentativa"]) == (
        "falha",
        1,
        "sucesso",
        2,
    )
    assert "500" in first["mensagem"]
    assert len(requests) == 2
    for request in requests:
        assert (request.method, request.route) == ("POST", "/hook")
        assert request.header("X-Token") == "segredo"
        assert json.loads(request.body) == publication


# -- contention ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_four_processes_of_four_threads_run_a_thousand_tasks_exactly_once(backend):
    procs = [
        backend.start_process(f"w{i}", wait_ready=False, QUEUE_CONCURRENCY=4) for i in range(4)
    ]
    backend.wait_processes_ready(procs)
    ids = backend.enqueue(
        [dict(payload=json.dumps({"sleep": 0.002}), chave_externa=f"k{i}") for i in range(1000)],
        bulk=True,
    )
    assert len(ids) == 1000
    deadline = time.monotonic() + 90
    while backend.statuses() != {"sucesso": 1000}:
        assert time.monotonic() < deadline, (
            f"1,000 tasks not done within 90 s: {backend.statuses()}"
        )
        for proc in procs:
            assert proc.alive(), f"{proc.name} died:\n{proc.output()[-3000:]}"
        time.sleep(0.05)

    summary = backend.query(
        f"SELECT count(*) AS total, count(DISTINCT task_id) AS tasks, "
        f"count(DISTINCT pid) AS pids FROM {backend.exec_table}"
    )[0]
    assert (summary["total"], summary["tasks"]) == (1000, 1000)
    assert summary["pids"] >= 2, "the processes should have shared the work"
    rows = backend.rows()
    assert all(r["tentativa"] == 1 and r["status"] == "sucesso" for r in rows)
    assert {r["id"] for r in rows} == set(ids)
    for proc in procs:
        proc.send(15)
    assert [proc.wait(20) for proc in procs] == [0, 0, 0, 0]
