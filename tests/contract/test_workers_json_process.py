"""``WORKERS_JSON`` with a real process: ``python -m nsj_queue_lib.workers_json`` serving two
queues of one database (issue 18), stopped by SIGTERM after their running tasks; and two
queues of two databases, PostgreSQL and MariaDB, each entry with its own ``DB_*``
(issue 43)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.contract.backends import Backend
from tests.helpers.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]
WORKER = "tests.contract.workers.contract_worker:ContractWorker"
NOOP = "tests.contract.workers.noop_worker:NoopWorker"


@pytest.mark.parametrize(
    "backend", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True
)
def test_workers_json_serves_two_queues_until_sigterm_finishes_their_running_tasks(backend, second):
    entries = [
        {"queue": backend.table, "worker": WORKER, "concurrency": 2},
        {
            "queue": second.table,
            "worker": WORKER,
            "concurrency": 1,
            "env": {"QUEUE_GRACE_PERIOD": 8},
        },
    ]
    env = backend.env(WORKERS_JSON=json.dumps(entries))
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsj_queue_lib.workers_json"],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def output() -> str:
        log.seek(0)
        return log.read().decode(errors="replace")

    try:
        backend.enqueue([dict(payload="{}")])
        second.enqueue([dict(payload="{}")])
        wait_for(
            lambda: backend.statuses() == {"sucesso": 1} and second.statuses() == {"sucesso": 1},
            20,
            "a task of each queue to succeed",
        )
        # In flight when SIGTERM arrives (grace periods 5 s and 8 s): both finish.
        slow = json.dumps({"sleep": 1.5})
        [slow_a] = backend.enqueue([dict(payload=slow)])
        [slow_b] = second.enqueue([dict(payload=slow)])
        for queue, task_id in ((backend, slow_a), (second, slow_b)):
            wait_for(
                lambda q=queue, t=task_id: q.row(t)["status"] == "processando",
                10,
                "the slow task to start",
            )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, output()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert backend.row(slow_a)["status"] == "sucesso"
    assert second.row(slow_b)["status"] == "sucesso"
    text = output()
    assert f"queue={backend.name} table={backend.table}: worker starting (concurrency=2" in text
    assert f"queue={second.name} table={second.table}: worker starting (concurrency=1" in text
    assert f"queue={second.name}: worker stopped (exit code 0)" in text


@pytest.fixture
def mariadb_queue(request, backend):
    """A queue on MariaDB, next to the backend's on PostgreSQL."""
    other = Backend("mysql", request.getfixturevalue("mysql_dsn"), backend.directory)
    other.create()
    try:
        yield other
    finally:
        other.close()


def database_env(queue) -> dict[str, object]:
    """The DB_* variables of ``queue``'s database, for its WORKERS_JSON entry."""
    return {
        "DB_DRIVER": queue.driver,
        "DB_HOST": queue.db["host"],
        "DB_PORT": queue.db["port"],
        "DB_BASE": queue.db["name"],
        "DB_USER": queue.db["user"],
        "DB_PASS": queue.db["password"],
    }


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_workers_json_serves_queues_of_two_databases_each_with_its_own_db_settings(
    backend, mariadb_queue
):
    """One process, two WORKERS_JSON entries: the environment's database is PostgreSQL
    (the first queue's); the second entry's env names MariaDB. Each queue's tasks run in
    its own database, each worker with its own pool and wake-ups (LISTEN on PostgreSQL,
    polling on MariaDB), and SIGTERM stops both after their running tasks."""
    entries = [
        {"queue": backend.table, "worker": NOOP, "concurrency": 2},
        {
            "queue": mariadb_queue.table,
            "worker": NOOP,
            "concurrency": 2,
            "env": {**database_env(mariadb_queue), "QUEUE_POLL_INTERVAL": 0.1},
        },
    ]
    env = backend.env(WORKERS_JSON=json.dumps(entries))
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsj_queue_lib.workers_json"],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def output() -> str:
        log.seek(0)
        return log.read().decode(errors="replace")

    try:
        on_pg = backend.enqueue([dict(payload="{}") for _ in range(5)])
        on_maria = mariadb_queue.enqueue([dict(payload="{}") for _ in range(5)])
        wait_for(
            lambda: (
                backend.statuses() == {"sucesso": 5} and mariadb_queue.statuses() == {"sucesso": 5}
            ),
            30,
            "every task of both databases to succeed",
        )
        slow = json.dumps({"sleep": 1.5})
        [slow_pg] = backend.enqueue([dict(payload=slow)])
        [slow_maria] = mariadb_queue.enqueue([dict(payload=slow)])
        for queue, task_id in ((backend, slow_pg), (mariadb_queue, slow_maria)):
            wait_for(
                lambda q=queue, t=task_id: q.row(t)["status"] == "processando",
                10,
                "the slow task to start",
            )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, output()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert backend.row(slow_pg)["status"] == "sucesso"
    assert mariadb_queue.row(slow_maria)["status"] == "sucesso"
    # Each task ran where it was enqueued, by this one process.
    pids = {backend.row(t)["mensagem"] for t in on_pg} | {
        mariadb_queue.row(t)["mensagem"] for t in on_maria
    }
    assert pids == {f"done by {proc.pid}"}
    text = output()
    assert "database postgresql://" in text and "database mysql://" in text, text
