"""Group commit (QUEUE_BATCH_SIZE > 1, docs/group-commit.md) on PostgreSQL and MariaDB.

The tasks are enqueued before the worker starts, so that its first claim
takes a whole group. Each handler writes its execution row with the id of
its transaction (``chave``): tasks sharing one show that they committed
together. In-process workers, except for kill -9.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest

from nsj_queue_lib import Task, WorkerBase, current_task
from nsj_queue_lib.db.postgres.store import PostgresQueueStore
from nsj_queue_lib.runtime.group_steps import DrainSteps
from tests.contract.test_contract import RETRY_BASE_MINUTES
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)

BOTH = pytest.mark.parametrize(
    "backend", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True
)
# No time bound: on a busy machine a group could close early and the tests see two.
GROUP = dict(
    queue_batch_size=10, queue_batch_max_ms=600_000, queue_base_interval_retry=RETRY_BASE_MINUTES
)


def write_exec(backend, bd_conn, tarefa) -> None:
    """The handler's write, in the group's transaction."""
    backend.execute(
        f"INSERT INTO {backend.exec_table} (task_id, chave, pid) VALUES (%s, %s, %s)",
        (tarefa["id"], "", 0),
        conn=bd_conn,
    )


def committed_writes(backend, side) -> int:
    """The handlers' writes another session (``side``, autocommit) sees: committed ones."""
    return int(backend.value(f"SELECT count(*) FROM {backend.exec_table}", conn=side))


def chains(backend) -> Counter:
    """Committed executions per task chain (first attempt's id)."""
    first = {r["id"]: r["id_inicial"] or r["id"] for r in backend.rows()}
    return Counter(first[r["task_id"]] for r in backend.exec_rows())


@BOTH
def test_a_failing_handler_is_rolled_back_alone_and_the_group_commits_once(backend):
    seen = []  # (task id, writes committed when its first attempt started)
    side = backend.connect(autocommit=True)  # the handlers' own: admin is the test thread's

    def execute(payload, tarefa, bd_conn):
        if tarefa["tentativa"] == 1:
            seen.append((tarefa["id"], committed_writes(backend, side)))
        write_exec(backend, bd_conn, tarefa)
        if payload in ("fails", "exits") and tarefa["tentativa"] == 1:
            if payload == "exits":
                raise SystemExit(3)
            raise RuntimeError("planned failure")
        return "ok"

    payloads = ["ok"] * 3 + ["fails"] + ["ok"] * 2 + ["exits"] + ["ok"] * 3
    ids = backend.enqueue([dict(payload=p) for p in payloads])
    worker = backend.run(backend.function_worker(execute, **GROUP))
    backend.wait_statuses({"sucesso": 10, "falha": 2}, 20, "the group and the two retries")
    assert "planned failure" in backend.row(ids[3])["mensagem"]
    assert "SystemExit" in backend.row(ids[6])["mensagem"]
    assert chains(backend) == Counter({task_id: 1 for task_id in ids})  # failures rolled back
    # One claim took all ten. Nothing committed until the first failure, which committed
    # its group (the three before it, and itself as failed) at once; the same at the next.
    assert seen == list(zip(ids, [0, 0, 0, 0, 3, 3, 3, 5, 5, 5], strict=True)), seen
    assert worker.alive() and worker.stop() == 0
    side.close()


@BOTH
def test_a_handler_ending_the_transaction_fails_clearly_and_loses_no_other_task(backend):
    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)
        if tarefa["tentativa"] == 1 and payload in ("commits", "rolls back"):
            bd_conn.commit() if payload == "commits" else bd_conn.rollback()
        return "ok"

    ids = backend.enqueue(
        [dict(payload=p) for p in ["ok", "commits", "ok", "ok", "rolls back", "ok"]]
    )
    worker = backend.run(backend.function_worker(execute, **GROUP))
    backend.wait_statuses({"sucesso": 6, "falha": 2}, 20, "every task done")
    for task_id in (ids[1], ids[4]):
        assert "committed or rolled back bd_conn" in backend.row(task_id)["mensagem"]
    done = chains(backend)
    # The commit kept the task before it (its writes and its 'sucesso' together); the
    # rollback undid the two before it, which ran again. The offenders' own first writes:
    # the commit's stayed (as today), the rollback's did not.
    assert done == Counter({ids[0]: 1, ids[1]: 2, ids[2]: 1, ids[3]: 1, ids[4]: 1, ids[5]: 1})
    assert worker.stop() == 0


@BOTH
def test_row_locks_taken_by_a_handler_last_until_its_group_commits(backend):
    backend.execute(f"INSERT INTO {backend.started_table} (task_id, pid) VALUES (0, 0)")
    locked = threading.Event()

    def execute(payload, tarefa, bd_conn):
        backend.execute(
            f"UPDATE {backend.started_table} SET pid = pid + 1 WHERE task_id = 0", conn=bd_conn
        )
        if payload == "slow":
            locked.set()
            time.sleep(0.5)
        write_exec(backend, bd_conn, tarefa)
        return "ok"

    ids = backend.enqueue([dict(payload=p) for p in ["ok", "slow", "ok"]])
    worker = backend.run(backend.function_worker(execute, **GROUP))
    assert locked.wait(15)
    # Another session waits for the row the group holds, then sees its committed count.
    with backend.transaction() as conn:
        backend.execute(
            f"UPDATE {backend.started_table} SET pid = pid + 10 WHERE task_id = 0", conn=conn
        )
        waited_until = {r["id"]: r["status"] for r in backend.rows()}
    assert waited_until[ids[0]] == waited_until[ids[1]] == "sucesso"
    backend.wait_statuses({"sucesso": 3}, 10, "the group")
    assert backend.value(f"SELECT pid FROM {backend.started_table} WHERE task_id = 0") == 13
    assert worker.stop() == 0


@BOTH
def test_cancel_and_timeout_inside_a_group(backend):
    release = threading.Event()

    # Only the hanging task has a time limit: a cancel is seen within a poll (1 s on
    # MySQL), which a limit on the cancelled task could beat on a busy machine.
    class GroupWorker(WorkerBase):
        @Task("pendura", timeout_s=1.0)
        def hangs(self, payload, tarefa, bd_conn):
            write_exec(backend, bd_conn, tarefa)
            if tarefa["tentativa"] == 1:
                release.wait(60)  # never looks at the stop request: given up
            return "ok"

        def execute(self, payload, tarefa, bd_conn):
            write_exec(backend, bd_conn, tarefa)
            if payload == "waits for cancel":
                while True:
                    current_task().check_cancelled()
                    time.sleep(0.02)
            return "ok"

    ids = backend.enqueue(
        [
            dict(payload="ok"),
            dict(payload="waits for cancel"),
            dict(payload="ok"),
            dict(payload="hangs", processo="pendura"),
            dict(payload="ok"),
            dict(payload="ok"),
        ]
    )
    worker = backend.run(GroupWorker(backend.settings(queue_task_timeout_grace=0.5, **GROUP)))
    wait_for(lambda: ids[1] in worker_running(worker), 15, "the cancellable task to start")
    with backend.transaction() as conn:
        backend.client(conn).cancel_task(ids[1])
    backend.wait_statuses(
        {"sucesso": 5, "cancelada": 1, "falha": 1}, 45, "the group's tasks settled"
    )
    assert backend.row(ids[1])["status"] == "cancelada"
    assert backend.row(ids[3])["mensagem"].startswith("timeout")
    done = chains(backend)
    assert ids[1] not in done  # the cancelled attempt's writes rolled back
    # Given up with its session, the hung task took the group's uncommitted successes
    # with it; they went back to the queue and ran once more: committed once each.
    assert all(done[t] == 1 for t in (ids[0], ids[2], ids[3], ids[4], ids[5])), done
    release.set()
    assert worker.alive() and worker.stop() == 0


@BOTH
def test_slow_handlers_do_not_keep_a_whole_group_from_the_other_executors(backend):
    threads = []

    def execute(payload, tarefa, bd_conn):
        threads.append(threading.get_ident())
        write_exec(backend, bd_conn, tarefa)
        time.sleep(0.2)  # ten times QUEUE_BATCH_MAX_MS
        return "ok"

    ids = backend.enqueue([dict(payload="slow")] * 6)
    worker = backend.run(
        backend.function_worker(
            execute, queue_concurrency=2, queue_batch_size=10, queue_batch_max_ms=20
        )
    )
    backend.wait_statuses({"sucesso": 6}, 20, "the slow tasks")
    # The first group claimed all six; after its first slow handler it gave back what
    # the pace allowed no more, and the other executor took part.
    assert len(set(threads)) == 2, threads
    assert chains(backend) == Counter({task_id: 1 for task_id in ids})
    assert worker.stop() == 0


def worker_running(worker) -> list[int]:
    runtime = worker.worker._runtime
    return [] if runtime is None else [item.task.id for item in runtime.executor.running_tasks()]


@BOTH
@pytest.mark.slow
def test_kill_9_mid_group_loses_nothing_and_commits_nothing_twice(backend):
    quick = [dict(payload=json.dumps({}), chave_externa=f"q{i}") for i in range(3)]
    sleeper = dict(
        payload=json.dumps({"sleep": 60, "sleep_on": [1], "started": True}), chave_externa="s"
    )
    ids = backend.enqueue(quick + [sleeper] + quick)
    victim = backend.start_process("victim", QUEUE_BATCH_SIZE="10", QUEUE_BATCH_MAX_MS="60000")
    wait_for(lambda: backend.started_ids() == [ids[3]], 15, "the victim to reach the sleeper")
    assert backend.exec_rows() == []  # the first three ran: uncommitted
    assert backend.statuses() == {"processando": 7}
    victim.kill9()
    backend.run(
        backend.contract_worker(
            queue_retry_thread_interval=0.3, queue_base_interval_retry=RETRY_BASE_MINUTES
        )
    )
    wait_for(
        lambda: backend.statuses() == {"falha_processando": 7, "sucesso": 7},
        30,
        "every task rescued and run again",
    )
    assert chains(backend) == Counter({task_id: 1 for task_id in ids})


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_failed_group_commit_costs_no_attempt_and_its_culprit_then_fails_alone(backend):
    # MariaDB has no equivalent: InnoDB checks constraints at each statement, never at
    # COMMIT, so there a group's COMMIT fails only with its connection (docs/group-commit.md).
    refuse = f"{backend.table}_refuse"
    backend.execute(
        f"CREATE FUNCTION {refuse}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.chave = 'poison' THEN RAISE EXCEPTION 'poison refused at commit'; END IF; "
        "RETURN NULL; END $$"
    )
    try:
        backend.execute(
            f"CREATE CONSTRAINT TRIGGER {backend.name}_refuse AFTER INSERT ON "
            f"{backend.exec_table} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
            f"EXECUTE FUNCTION {refuse}()"
        )
        ran = []  # task ids as handlers start

        def execute(payload, tarefa, bd_conn):
            ran.append(tarefa["id"])
            poison = payload == "poison" and tarefa["tentativa"] == 1  # its retry succeeds
            backend.execute(
                f"INSERT INTO {backend.exec_table} (task_id, chave, pid) "
                "VALUES (%s, %s, (pg_current_xact_id()::text::bigint %% 1000000000)::int)",
                (tarefa["id"], "poison" if poison else "ok"),
                conn=bd_conn,
            )
            return "ok"

        payloads = ["ok"] * 4 + ["poison"] + ["ok"] * 5
        ids = backend.enqueue([dict(payload=p) for p in payloads])
        worker = backend.run(backend.function_worker(execute, **GROUP))
        backend.wait_statuses({"sucesso": 10, "falha": 1}, 30, "the group run again alone")
        rows = {r["id"]: r for r in backend.rows()}
        # The group's commit failed: none of its tasks lost an attempt but the culprit's,
        # whose commit failed again alone and recorded its failure.
        assert [rows[i]["status"] for i in ids] == ["sucesso"] * 4 + ["falha"] + ["sucesso"] * 5
        assert all(rows[i]["tentativa"] == 1 for i in ids)
        assert "poison refused at commit" in rows[ids[4]]["mensagem"]
        assert chains(backend) == Counter({task_id: 1 for task_id in ids})
        # All ten ran in the group, then each again in a transaction of its own.
        assert ran[:10] == ids and [i for i in ran[10:] if i in ids] == ids, ran
        transactions = [r["pid"] for r in backend.exec_rows()]
        assert len(set(transactions)) == len(transactions) == 10, transactions
        assert worker.alive() and worker.stop() == 0
    finally:
        backend.execute(f"DROP FUNCTION IF EXISTS {refuse}() CASCADE")


@BOTH
def test_tasks_finished_before_a_known_slow_handler_commit_before_it_starts(backend):
    side = backend.connect(autocommit=True)
    seen = []  # at each slow handler's start: the statuses of the tasks enqueued before it

    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)
        if tarefa["processo"] == "slow":
            before = f"id < {int(tarefa['id'])} AND id > %s"
            seen.append(
                backend.query(
                    f"SELECT status FROM {backend.table} WHERE {before}", (int(payload),), conn=side
                )
            )
            time.sleep(0.3)  # three times QUEUE_BATCH_MAX_MS
        return "ok"

    worker = backend.run(
        backend.function_worker(execute, queue_batch_size=10, queue_batch_max_ms=100)
    )
    # The worker learns how long "slow" takes, then that the others are fast.
    backend.enqueue([dict(processo="slow", payload="0")])
    backend.enqueue([dict(processo="fast")] * 20)
    backend.wait_statuses({"sucesso": 21}, 20, "the first tasks")
    last = max(r["id"] for r in backend.rows())
    backend.enqueue([dict(processo="fast")] * 2 + [dict(processo="slow", payload=str(last))])
    backend.wait_statuses({"sucesso": 24}, 20, "the fast tasks and the slow one")
    # Without looking ahead, the group would have held the two fast tasks' commit for the
    # slow handler's 0.3 s: they committed before it started.
    assert [r["status"] for r in seen[-1]] == ["sucesso", "sucesso"], seen
    assert worker.stop() == 0
    side.close()


@BOTH
def test_an_executor_stepping_back_leaves_no_freed_key_waiting_for_a_slow_handler(
    backend, monkeypatch
):
    """The executor whose claim came back short commits without claiming and goes idle
    (runtime/group_commit.py, issue 19): the next tasks of the keys it freed were its
    to claim, and the other executor is in a slow handler. They start after
    QUEUE_BATCH_MAX_MS all the same (the stepped-back thread claims them itself), not
    once the slow handler returns."""
    max_ms = 300
    slow_started, slow_may_end = threading.Event(), threading.Event()
    started: dict[str, float] = {}
    ended: dict[str, float] = {}

    def execute(payload, tarefa, bd_conn):
        started[payload] = time.monotonic()
        if payload == "slow":
            slow_started.set()
            slow_may_end.wait(60)  # until the checks below are done
        ended[payload] = time.monotonic()
        return "ok"

    stepped_back = []
    steps_back = DrainSteps.steps_back

    def recording(self, short):
        stepped_back.append(steps_back(self, short))
        return stepped_back[-1]

    monkeypatch.setattr(DrainSteps, "steps_back", recording)
    # The dispatcher's recheck 2.2 s after the last notification (PostgreSQL) would start
    # them within the bound below too: without it, only the step-back's own claim can.
    monkeypatch.setattr(PostgresQueueStore, "claim_recheck_seconds", None)
    backend.enqueue([dict(payload="slow")])
    worker = backend.run(
        backend.function_worker(
            execute, queue_concurrency=2, queue_batch_size=10, queue_batch_max_ms=max_ms
        )
    )
    assert slow_started.wait(20), "the slow task never started"
    keyed = [dict(payload=f"{key}{n}", lock_key=key) for n in (1, 2) for key in "ab"]
    backend.enqueue(keyed, bulk=True)
    wait_for(lambda: {"a2", "b2"} <= set(ended), 20, "the freed keys' next tasks")
    first_group_done = max(ended["a1"], ended["b1"])
    waited = min(started["a2"], started["b2"]) - first_group_done
    # Bounded: QUEUE_BATCH_MAX_MS, not the slow handler's time.
    assert waited < 3.0, waited
    assert "slow" not in ended, "the freed keys waited for the slow handler"
    # The executor of a1 and b1 stepped back (the slow one draining): its group's commit
    # claimed nothing.
    assert True in stepped_back, stepped_back
    slow_may_end.set()
    assert worker.stop() == 0
