"""A SIGTERM handler calls ``WorkerRuntime.stop()`` in the main thread, between any two
bytecodes, also while that thread holds the executor's lock (the supervisor reads
``stuck_threads()``/``totals()`` under it): ``interrupt()`` must not deadlock there."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from nsj_queue_lib.runtime.executor import TaskExecutor
from nsj_queue_lib.settings import Settings

pytestmark = pytest.mark.timeout(5)  # a deadlock fails the test

SETTINGS = Settings(db_host="h", db_name="d", db_user="u", queue_name="q", queue_table="q")


def test_a_signal_handler_interrupts_the_executor_while_the_main_thread_holds_its_lock():
    stop = threading.Event()
    executor = TaskExecutor(SETTINGS, None, None, None, stop, None, None)  # type: ignore[arg-type]
    handled = []

    def on_term(signum, frame):
        stop.set()
        executor.interrupt()  # what WorkerRuntime.stop() does
        handled.append(signum)

    previous = signal.signal(signal.SIGUSR1, on_term)
    try:
        with executor._cond:
            # As if the signal came while the supervisor read stuck_threads() under the lock:
            os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs before this block ends
            handled.append("lock still held")
        assert handled == [signal.SIGUSR1, "lock still held"]
    finally:
        signal.signal(signal.SIGUSR1, previous)
