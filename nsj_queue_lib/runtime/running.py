"""The registry of the tasks a worker is running: what timeouts, cancels and shutdown talk to.

Every drain lists a task here from its handler's start to its end
(``start``/``end``); the lifecycle thread reads the list for progress, cancel
requests and timeouts (``request_stop``, ``abandon``); a stopping worker waits
on it (``wait_idle``), also for drains holding claimed tasks whose handlers
have not started yet (``draining``) and for commit groups still to commit.
It also counts the attempts that succeeded and failed since the start.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from nsj_queue_lib.context import TaskContext
from nsj_queue_lib.model import TaskRecord

EARLY_STOPS_KEPT = 1024  # stop requests remembered for attempts not running here

# A running task's state (RunningTask.state), changed under the registry's lock.
RUNNING, FINISHING, ABANDONED = "running", "finishing", "abandoned"


@dataclasses.dataclass
class RunningTask:
    task: TaskRecord
    conn: Any
    started: float = dataclasses.field(default_factory=time.monotonic)
    context: TaskContext = dataclasses.field(init=False)
    # RUNNING until the handler is done: then FINISHING, or ABANDONED when the timeout
    # gave the task up (runtime/timeouts.py): its thread must not touch it any more.
    state: str = RUNNING
    thread_id: int | None = dataclasses.field(default_factory=threading.get_ident)
    timeout_message: str | None = None  # set when its timeout expired

    def __post_init__(self) -> None:
        self.context = TaskContext(self.task.id, self.task.row.get("id_inicial"))


class RunningTasks:
    """The running tasks, by id, and the counters of the attempts that ended."""

    def __init__(self) -> None:
        # Reentrant: a SIGTERM handler (WorkerRuntime.stop) runs in the main thread between
        # any two bytecodes, also while that thread holds this lock.
        self.lock = threading.RLock()
        # A running task ended, a drain or a group closed (for wait_idle).
        self._finished = threading.Condition(self.lock)
        # wait_idle calls waiting: with none, a task's end notifies nobody and skips the
        # Condition's Python calls that would tell so.
        self._idle_waiters = 0
        self._running: dict[int, RunningTask] = {}
        # Threads whose task was abandoned: replaced, they end once their handler returns.
        self._stuck: list[threading.Thread] = []
        # Threads draining with a connection: they may hold claimed tasks not running yet.
        self._draining: collections.Counter[threading.Thread] = collections.Counter()
        # Stop requests for attempts not running here (yet): a cancel notified between a
        # claim's commit and the task's start is applied when it starts.
        self._early_stops: collections.OrderedDict[int, str] = collections.OrderedDict()
        self._done = 0
        self._failed = 0

    # -- a task's start and end (the hot path: once per task) --

    def start(self, conn: Any, task: TaskRecord) -> RunningTask:
        """``task`` runs on ``conn`` from now on; asked to stop at once if a stop request
        came before it started."""
        item = RunningTask(task, conn)
        with self.lock:
            self._running[task.id] = item
            early = self._early_stops.pop(task.id, None)
        if early is not None:
            item.context.request_stop(early)
        return item

    def end(self, task: TaskRecord) -> None:
        with self.lock:
            self._running.pop(task.id, None)
            if self._idle_waiters:
                self._finished.notify_all()

    def finishing(self, item: RunningTask) -> bool:
        """The handler is done: FINISHING, unless the task was abandoned meanwhile (False)."""
        with self.lock:
            if item.state == ABANDONED:
                return False
            item.state = FINISHING
            return True

    def count_done(self, count: int = 1) -> None:
        with self.lock:
            self._done += count

    def count_failed(self) -> None:
        with self.lock:
            self._failed += 1

    # -- observation --

    def tasks(self) -> list[RunningTask]:
        with self.lock:
            return list(self._running.values())

    def totals(self) -> tuple[int, int]:
        """(attempts that succeeded, attempts that failed) since the start."""
        with self.lock:
            return self._done, self._failed

    # -- stop requests and timeouts --

    def request_stop(self, task_id: int, reason: str) -> bool:
        """Ask the running attempt ``task_id`` to stop; False when it does not run here."""
        with self.lock:
            item = self._running.get(task_id)
            if item is None:
                self._early_stops[task_id] = reason
                while len(self._early_stops) > EARLY_STOPS_KEPT:
                    self._early_stops.popitem(last=False)
                return False
        return item.context.request_stop(reason)

    def abandon(
        self, task_id: int, leave_behind: Callable[[RunningTask], list[threading.Thread]]
    ) -> RunningTask | None:
        """Give up a task whose handler does not return; None when it finished meanwhile.
        ``leave_behind`` (under the lock) replaces its thread and returns the threads now
        stuck with its handler."""
        with self.lock:
            item = self._running.get(task_id)
            if item is None or item.state != RUNNING:
                return None
            item.state = ABANDONED
            del self._running[task_id]
            self._failed += 1
            self._finished.notify_all()
            self._stuck.extend(leave_behind(item))
        return item

    def releasing(self) -> tuple[list[RunningTask], list[RunningTask]]:
        """After the grace period: (every running task, those now ABANDONED to be released).
        A task already FINISHING is its thread's to settle."""
        with self.lock:
            running = list(self._running.values())
            releasing = [item for item in running if item.state == RUNNING]
            for item in releasing:
                item.state = ABANDONED
        return running, releasing

    def stuck(self) -> int:
        """Threads still running a handler that was given up."""
        with self.lock:
            self._stuck = [t for t in self._stuck if t.is_alive()]
            return len(self._stuck)

    def is_stuck(self, thread: threading.Thread) -> bool:
        with self.lock:
            return thread in self._stuck

    def unstick(self, thread: threading.Thread) -> None:
        """A pooled thread whose given-up handler returned: it lives on, no longer stuck."""
        with self.lock:
            self._stuck = [t for t in self._stuck if t is not thread]

    # -- waiting for the end --

    @contextlib.contextmanager
    def draining(self) -> Iterator[None]:
        """Around a drain, from its connection on: between a claim's commit and its
        handler's start the task is 'processando' but not yet running, where a loaded
        machine can leave a thread for a long while; a stopping worker waits for it as for
        a running task, instead of exiting with the task left to the retry service."""
        thread = threading.current_thread()
        with self._finished:
            self._draining[thread] += 1
        try:
            yield
        finally:
            with self._finished:
                self._draining[thread] -= 1
                if self._draining[thread] <= 0:
                    del self._draining[thread]
                self._finished.notify_all()

    def changed(self) -> None:
        """Wake ``wait_idle`` (a commit group closed)."""
        with self._finished:
            self._finished.notify_all()

    def wait_idle(self, timeout: float, groups_open: Callable[[], bool]) -> bool:
        """Wait until no task runs, no drain holds unstarted claims and ``groups_open()``
        is False; False if some still run after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._finished:
            while self._running or self._drains_in_flight() or groups_open():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle_waiters += 1
                try:
                    self._finished.wait(remaining)
                finally:
                    self._idle_waiters -= 1
        return True

    def _drains_in_flight(self) -> bool:
        """Under the lock: a drain whose handler was given up does not count: it was
        replaced."""
        return any(thread not in self._stuck for thread in self._draining)
