"""/healthz of a running worker (PostgreSQL, in-process): a supervised thread that dies of an
error turns it 503, naming the thread, for as long as the worker takes to stop.
"""

from __future__ import annotations

import threading

import pytest

from nsj_queue_lib.runtime.renotify import RenotifyService
from nsj_queue_lib.runtime.worker_runtime import EXIT_THREAD_DIED
from tests.helpers.endpoints import free_port, get_json
from tests.helpers.processes import enqueue, wait_for


class ThreadKilled(BaseException):
    """Nothing in a service's loop catches it: the thread ends."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_healthz_names_a_thread_that_died_while_the_worker_drains_its_task(
    start_worker, pg_queue, pg_dsn, monkeypatch
):
    kill, started, release = threading.Event(), threading.Event(), threading.Event()
    work = RenotifyService.work

    def work_or_die(self, conn):
        if kill.is_set():
            raise ThreadKilled("the renotify service's run ends its thread")
        return work(self, conn)

    monkeypatch.setattr(RenotifyService, "work", work_or_die)

    def execute(payload, tarefa, bd_conn):
        started.set()
        release.wait(10)

    port = free_port()
    worker = start_worker(execute, queue_metrics_port=port, queue_notify_thread_interval=0.05)
    # "starting" until the runtime has registered its supervised threads.
    wait_for(lambda: get_json(port, "/healthz") == (200, {"status": "ok"}), 10, "/healthz ok")
    enqueue(pg_dsn, pg_queue.table, [{}])
    assert started.wait(10)
    kill.set()
    # The worker stops (within the supervisor's half second) but waits for its running task
    # (the grace period); meanwhile /healthz says why.
    wait_for(lambda: get_json(port, "/readyz") == (503, {"status": "stopping"}), 5, "stopping")
    assert worker.alive()
    assert get_json(port, "/healthz") == (
        503,
        {"status": "unhealthy", "dead_threads": ["nsj-renotify"]},
    )
    release.set()
    wait_for(lambda: not worker.alive(), 10, "the worker to stop")
    assert worker.exit_code == EXIT_THREAD_DIED
