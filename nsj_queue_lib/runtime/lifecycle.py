"""The lifecycle thread: running tasks' progress, cancel requests and timeouts.

One thread per worker ticks every TICK_SECONDS while the worker runs: it writes
the progress the running tasks reported (``progress.py``), polls for cancel
requests when due (``cancel_watch.py``) and enforces timeouts
(``timeouts.py``). An error in one round is logged and the next round goes on.
"""

from __future__ import annotations

import threading
import time

from nsj_queue_lib.log import get_logger
from nsj_queue_lib.runtime.cancel_watch import CancelWatcher
from nsj_queue_lib.runtime.executor import TaskExecutor
from nsj_queue_lib.runtime.progress import ProgressWriter
from nsj_queue_lib.runtime.timeouts import TimeoutEnforcer

logger = get_logger("lifecycle")

# At most this many progress writes per second and task; also the timeouts' resolution.
TICK_SECONDS = 0.25


class LifecycleThread:
    def __init__(
        self,
        executor: TaskExecutor,
        progress: ProgressWriter,
        cancels: CancelWatcher,
        timeouts: TimeoutEnforcer,
        stop: threading.Event,
    ):
        self.executor = executor
        self.progress = progress
        self.cancels = cancels
        self.timeouts = timeouts
        self._stop = stop

    def run(self) -> None:
        next_poll = time.monotonic()
        while not self._stop.wait(TICK_SECONDS):
            try:
                self.progress.flush(item.context for item in self.executor.running_tasks())
                if time.monotonic() >= next_poll:
                    self.cancels.poll()
                    next_poll = time.monotonic() + self.cancels.poll_seconds
                self.timeouts.check()
            except Exception:  # one failed round must not end the thread
                logger.exception("lifecycle round failed")
