"""A deployment that handles some processos only: ``@Task`` methods, ``execute`` untouched.

DEPLOYMENT_PROCESSOS (comma-separated) names the processos this deployment handles;
DEPLOYMENT_NAME is written with each execution (the exec table's ``chave``), so a test
sees which deployment ran a task. A payload ``{"fail": true}`` fails every attempt, so the
task's dead letter follows; the dead letter's run is recorded as ``dead:<name>``. Other
environment as ``contract_worker.py`` (CONTRACT_EXEC_TABLE, CONTRACT_READY_FILE).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

from nsj_queue_lib import Task, WorkerBase
from tests.contract.workers.contract_worker import ContractWorker, _spec

NAME = os.environ.get("DEPLOYMENT_NAME", "")


def _record(worker: ContractWorker, bd_conn, tarefa, what: str) -> None:
    with bd_conn.cursor() as cur:
        cur.execute(
            f"INSERT INTO {worker.exec_table} (task_id, chave, pid) VALUES (%s, %s, %s)",
            (tarefa["id"], what, os.getpid()),
        )


def _handler(self, payload, tarefa, bd_conn):
    _record(self, bd_conn, tarefa, NAME)
    if _spec(payload).get("fail"):
        raise RuntimeError(f"planned failure in {NAME}")
    return f"done by {NAME}"


def _method(processo: str):
    def run(self, payload, tarefa, bd_conn):
        return _handler(self, payload, tarefa, bd_conn)

    run.__name__ = f"run_{processo}"
    return Task(processo)(run)


def deployment_class(processos: list[str]) -> type:
    """A worker class with one ``@Task`` method per processo, and WorkerBase's ``execute``
    (ContractWorker's is put back): it claims its processos only."""
    methods: dict = {f"run_{p}": _method(p) for p in processos}
    methods["execute"] = WorkerBase.execute

    def execute_dead(self, payload, tarefa, bd_conn):
        _record(self, bd_conn, tarefa, f"dead:{NAME}")
        return f"dead letter handled by {NAME}"

    methods["execute_dead"] = execute_dead
    return type("DeploymentWorker", (ContractWorker,), methods)


if __name__ == "__main__":
    processos = [p for p in os.environ["DEPLOYMENT_PROCESSOS"].split(",") if p]
    deployment_class(processos)().run()
