"""Deployments that share one queue table, each handling its own processos (issue 37).

Two real worker processes, one with ``@Task("alpha")`` and one with ``@Task("beta")``,
neither overriding ``execute``: each claims only its own processos and their dead
letters, and a processo no running worker handles stays 'pendente'.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(180)

DEPLOYMENT_WORKER = Path(__file__).resolve().parent / "workers" / "deployment_worker.py"
BACKENDS = pytest.mark.parametrize(
    "backend",
    [
        "postgres",
        "postgres-via-server",
        pytest.param("mysql", marks=pytest.mark.mysql),
    ],
    indirect=True,
)


@BACKENDS
def test_two_deployments_on_one_table_each_run_their_own_processos(backend):
    tasks = [dict(processo="alpha", chave_externa=f"a{i}") for i in range(19)]
    tasks += [dict(processo="beta", chave_externa=f"b{i}") for i in range(19)]
    tasks += [dict(processo="alpha", chave_externa="a-fails", payload=json.dumps({"fail": True}))]
    tasks += [dict(processo="gamma", chave_externa="nobody")]
    ids = backend.enqueue(tasks)
    by_id = dict(zip(ids, tasks, strict=True))
    procs = [
        backend.start_process(
            name,
            script=DEPLOYMENT_WORKER,
            DEPLOYMENT_NAME=name,
            DEPLOYMENT_PROCESSOS=name,
            QUEUE_MAX_RETRY="2",
            QUEUE_BASE_INTERVAL_RETRY="0.001",
        )
        for name in ("alpha", "beta")
    ]
    wait_for(
        lambda: backend.statuses().get("sucesso", 0) == 38 + 1,  # and the dead letter
        60,
        "every alpha and beta task, and the dead letter",
    )
    runs = backend.exec_rows()
    ran_by = {r["task_id"]: r["chave"] for r in runs}
    for task_id, task in by_id.items():
        if task["processo"] in ("alpha", "beta") and task["chave_externa"] != "a-fails":
            assert ran_by[task_id] == task["processo"], (task, ran_by.get(task_id))
            assert backend.row(task_id)["tentativa"] == 1
            assert backend.row(task_id)["status"] == "sucesso"
    # Each ran once, by its own deployment; the failing alpha task's two attempts (their
    # writes rolled back) and its dead letter ran in alpha too.
    assert Counter(ran_by.values()) == Counter({"alpha": 19, "beta": 19, "dead:alpha": 1})
    failed = backend.rows("status = %s", ("falha",))
    assert [(r["processo"], r["tentativa"]) for r in failed] == [("alpha", 1), ("alpha", 2)]
    assert all("planned failure in alpha" in r["mensagem"] for r in failed)
    # Nobody handles gamma: it waits, never failed.
    gamma = backend.row(ids[-1])
    assert (gamma["status"], gamma["tentativa"]) == ("pendente", 1)
    assert "no handler" not in (gamma["mensagem"] or "")
    # nsjq status names it, and the two deployments it sees (the workers table).
    status = nsjq_status(backend)
    assert status["unhandled_processos"] == ["gamma"]
    assert sorted(json.loads(w["processos"]) for w in status["workers"]) == [["alpha"], ["beta"]]
    text = nsjq_status(backend, as_json=False)
    assert "workers: 2 (" in text and "no worker handles these: gamma" in text
    for proc in procs:
        proc.send(signal.SIGTERM)
    assert [proc.wait(30) for proc in procs] == [0, 0]
    # Stopped, they left the workers table.
    assert nsjq_status(backend)["workers"] == []


def nsjq_status(backend, as_json: bool = True):
    """``nsjq status`` as a user runs it, with the workers' environment."""
    argv = ["status", "--json"] if as_json else ["status"]
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from nsj_queue_lib.cli import main; sys.exit(main())"]
        + argv,
        env=backend.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout) if as_json else result.stdout


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_without_the_workers_table_a_worker_runs_and_nsjq_status_says_unknown(backend, caplog):
    """A queue created before the workers table (no db_gen --upgrade yet): the table is
    advisory, so the worker only warns once, and nsjq status cannot tell who runs."""
    backend.execute(f"DROP TABLE {backend.table}_workers")
    caplog.set_level(logging.WARNING)
    [task_id] = backend.enqueue([dict(payload="x")])
    worker = backend.run(backend.contract_worker())
    backend.wait_statuses({"sucesso": 1}, 20, "the task")
    warnings = [r.getMessage() for r in caplog.records if "workers table" in r.getMessage()]
    assert len(warnings) == 1 and "db_gen --upgrade" in warnings[0]
    assert "workers: unknown" in nsjq_status(backend, as_json=False)
    assert nsjq_status(backend)["workers"] is None
    assert worker.alive() and worker.stop() == 0
    assert backend.row(task_id)["status"] == "sucesso"
