"""``WORKERS_JSON`` with a real process: ``python -m nsj_queue_lib.workers_json`` serving two
queues of one database (issue 18), stopped by SIGTERM after their running tasks."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]
WORKER = "tests.contract.workers.contract_worker:ContractWorker"


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
