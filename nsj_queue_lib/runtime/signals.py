"""SIGTERM and SIGINT stop the worker, without a lock taken in the signal handler.

Python runs a signal handler in the main thread between two bytecodes, wherever
that thread is. The worker's main thread spends its life in ``Event.wait``,
which holds the event's own lock around its wait; a handler that calls
``Event.set`` at such a moment waits for that lock forever, and the worker
never stops (seen once in a benchmark: no "stopping" line after SIGTERM, the
process killed 60 s later). So the handler only writes a byte to a pipe
(``Waker``); a thread of its own reads it and asks the worker to stop, as any
other thread may.
"""

from __future__ import annotations

import select
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from nsj_queue_lib.runtime.waker import Waker

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalStop:
    """Installed by the main thread for the worker's run, removed after it."""

    def __init__(self, stop: Callable[[], None], signals: Sequence[int] = STOP_SIGNALS):
        self._stop = stop
        self._signals = tuple(signals)
        self._waker = Waker()
        self._closing = False
        self._previous: dict[int, Any] = {}
        self._thread = threading.Thread(target=self._watch, name="nsj-signals", daemon=True)

    def install(self) -> None:
        self._thread.start()
        for signum in self._signals:
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._waker.wake()  # a write(2): no lock, whatever the main thread holds

    def _watch(self) -> None:
        while True:
            select.select([self._waker], [], [])
            self._waker.drain()
            if self._closing:
                return
            self._stop()

    def close(self) -> None:
        """The previous handlers back, the watching thread ended, the pipe closed."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        if self._thread.is_alive():
            self._closing = True
            self._waker.wake()
            self._thread.join(timeout=5)
        self._waker.close()
