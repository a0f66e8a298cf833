"""SIGTERM stops the worker without taking a lock in the signal handler (runtime/signals.py).

The handler runs in the main thread between two bytecodes, wherever it is: here while it
holds the stop event's own lock, as ``Event.wait`` does around its wait. A handler that
set the event itself would wait for that lock forever (the test would hang); the
handler writes to a pipe and another thread sets the event once the lock is free."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from nsj_queue_lib.runtime.signals import SignalStop

pytestmark = pytest.mark.timeout(30)
SIGNAL = signal.SIGUSR2


def test_a_signal_while_the_main_thread_holds_the_stop_event_s_lock_stops_the_worker():
    assert threading.current_thread() is threading.main_thread()
    stopped = threading.Event()
    before = signal.getsignal(SIGNAL)
    signals = SignalStop(stopped.set, [SIGNAL])
    signals.install()
    try:
        with stopped._cond:  # what Event.wait holds around its wait (CPython)
            os.kill(os.getpid(), SIGNAL)  # its handler runs here, in this thread
            time.sleep(0.2)
            assert not stopped.is_set()  # set only once the lock is free
        assert stopped.wait(5)
    finally:
        signals.close()
    assert signal.getsignal(SIGNAL) is before  # the previous handler is back


def test_each_signal_asks_again_and_close_ends_the_thread():
    calls = []
    signals = SignalStop(lambda: calls.append(1), [SIGNAL])
    signals.install()
    try:
        os.kill(os.getpid(), SIGNAL)
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls
    finally:
        signals.close()
    assert not any(t.name == "nsj-signals" and t.is_alive() for t in threading.enumerate())


def test_close_without_install_closes_the_pipe():
    signals = SignalStop(lambda: None, [SIGNAL])
    before = signal.getsignal(SIGNAL)
    link = f"/proc/self/fd/{signals._waker.fileno()}"
    pipe = os.readlink(link)
    assert pipe.startswith("pipe:")
    signals.close()
    # Closed: the descriptor is gone, or (another thread opened a file since) no longer it.
    assert not os.path.lexists(link) or os.readlink(link) != pipe
    assert signal.getsignal(SIGNAL) is before  # never installed, nothing changed
