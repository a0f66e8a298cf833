"""Shutdown guard on every backend (issue 22, scripts/mutants.py).

When the grace period ends, a task still running is released: its database
session is ended, so whatever its handler wrote rolls back even if the
handler finishes a moment later and its worker goes on to commit. In a real
worker process the exit would hide a missing session end (the process takes
its connections with it), so the worker runs in this process and its handler
is held until after ``run_until_stopped`` returned: it then tries to finish
and commit, deterministically after the grace period.
"""

from __future__ import annotations

import os
import threading

import pytest

pytestmark = pytest.mark.timeout(60)


def test_a_handler_finishing_after_the_grace_period_commits_nothing(backend):
    started, finish = threading.Event(), threading.Event()
    handler_conns = []

    def execute(payload, tarefa, bd_conn):
        handler_conns.append(bd_conn)
        backend.execute(  # in the task's transaction: must never commit
            f"INSERT INTO {backend.exec_table} (task_id, chave, pid) VALUES (%s, %s, %s)",
            (tarefa["id"], tarefa["chave_externa"], os.getpid()),
            conn=bd_conn,
        )
        started.set()
        finish.wait(30)
        return "finished too late"

    running = backend.run(backend.function_worker(execute, queue_grace_period=0.3))
    [task_id] = backend.enqueue([dict(payload="slow", chave_externa="late")])
    assert started.wait(15), "the handler did not start"
    runtime = running.worker._runtime
    assert running.stop() == 0  # the grace period ended with the handler still inside

    released = backend.row(task_id)
    assert (released["status"], released["reenfileirado"]) == ("falha_processando", True)
    # The release ended the handler's session: its connection answers no more (the
    # executor would also never commit an attempt taken from it, so without this check
    # a release that left the session running would go unnoticed).
    with pytest.raises(Exception):  # noqa: B017 - each driver names a lost session its own way
        backend.execute("SELECT 1", conn=handler_conns[0])
    # Now the handler returns, and its executor tries to settle and commit the task.
    finish.set()
    runtime.executor.join(15)
    assert not any(t.is_alive() for t in runtime.executor.slots.threads())
    assert backend.exec_rows() == []
    assert backend.row(task_id)["status"] == "falha_processando"
    [retry] = backend.rows("id_anterior = %s", (task_id,))
    assert retry["tentativa"] == 2 and retry["status"] in ("pendente", "agendada")
