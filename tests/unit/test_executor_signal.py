"""A SIGTERM handler calls ``WorkerRuntime.stop()`` in the main thread, between any two
bytecodes, also while that thread holds the executor's locks (the supervisor reads
``stuck_threads()``/``totals()``/``busy_threads()`` under them): ``interrupt()`` must not
deadlock there."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from nsj_queue_lib.runtime.running import RunningTasks
from nsj_queue_lib.runtime.tokens import WakeTokens

pytestmark = pytest.mark.timeout(5)  # a deadlock fails the test


def test_a_signal_handler_interrupts_the_slots_while_the_main_thread_holds_their_locks():
    stop = threading.Event()
    tokens = WakeTokens(4, stop)
    running = RunningTasks()
    handled = []

    def on_term(signum, frame):
        stop.set()
        tokens.interrupt()  # what WorkerRuntime.stop() does, through the executor
        running.totals()
        handled.append(signum)

    previous = signal.signal(signal.SIGUSR1, on_term)
    try:
        with tokens.cond, running.lock:
            # As if the signal came while the supervisor read busy_threads() under the lock:
            os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs before this block ends
            handled.append("lock still held")
        assert handled == [signal.SIGUSR1, "lock still held"]
    finally:
        signal.signal(signal.SIGUSR1, previous)
