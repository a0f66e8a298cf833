"""The executor: the worker's slots draining tasks, as the rest of the worker sees them.

A task's path, the default one first (PostgreSQL, group commit):

- ``tokens.py``: the dispatcher (LISTEN, polling or the socket server) wakes
  idle slots with tokens;
- ``slots.py``: a woken thread runs its drain; ``async_slots.py`` is the same
  over an event loop when some handlers are ``async def``;
- ``drain_group.py``: claim up to QUEUE_BATCH_SIZE tasks, run their handlers
  one after another in one transaction, commit them with the next group's
  claim (``group_recovery.py`` when something fails); or ``drain_single.py``:
  one commit per task, with the next claim;
- ``attempt.py``: one claimed task's protocol, the same in every drain: start,
  the handler in the task's transaction, its outcome; ``failures.py``: a
  failed attempt's decision and record;
- ``running.py``: the registry of running tasks that the lifecycle thread
  (progress, cancels, timeouts) and the shutdown talk to.

This facade is what the dispatcher, the lifecycle thread and the worker
runtime hold: wake-ups, the running tasks, giving up a task, waiting for the
end and releasing what still runs after the grace period.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from nsj_queue_lib.db.task_session import Locks, TaskSession
from nsj_queue_lib.runtime.failures import Failures
from nsj_queue_lib.runtime.release import SessionTerminator, release_running
from nsj_queue_lib.runtime.running import RunningTask, RunningTasks


class Slots(Protocol):
    """Threads (``ThreadSlots``) or coroutines on an event loop (``AsyncSlots``)."""

    def start(self) -> None: ...
    def wake(self, count: int = 1) -> None: ...
    def interrupt(self) -> None: ...
    def busy(self) -> int: ...
    def threads(self) -> list[threading.Thread]: ...
    def dead_threads(self) -> list[threading.Thread]: ...
    def join(self, timeout: float) -> None: ...
    def leave_behind(self, item: RunningTask) -> list[threading.Thread]: ...
    def given_up(self, item: RunningTask) -> None: ...


class Drain(Protocol):
    def open(self) -> bool: ...
    def given_up(self, item: RunningTask) -> None: ...


class TaskExecutor:
    def __init__(
        self,
        running: RunningTasks,
        failures: Failures,
        slots: Slots,
        drain: Drain,
        terminate_session: SessionTerminator,
        *,
        asynchronous: bool,
        group_commit: bool,
    ):
        self.running = running
        self.failures = failures
        self.slots = slots
        self.drain = drain
        self._terminate_session = terminate_session
        self.asynchronous = asynchronous  # async slots (some handlers are ``async def``)
        self.group_commit = group_commit  # the drain commits in groups

    @property
    def session(self) -> TaskSession:
        return self.failures.session

    @property
    def liveness(self) -> Locks:
        """Where the liveness locks live (the session's)."""
        return self.failures.session.locks

    def start(self) -> None:
        self.slots.start()

    def wake(self, count: int = 1) -> None:
        """Let up to ``count`` slots try to claim."""
        self.slots.wake(count)

    def interrupt(self) -> None:
        self.slots.interrupt()

    # -- observation --

    def running_tasks(self) -> list[RunningTask]:
        return self.running.tasks()

    def busy_threads(self) -> int:
        """Slots claiming or running tasks (not waiting for a wake-up)."""
        return self.slots.busy()

    def totals(self) -> tuple[int, int]:
        """(attempts that succeeded, attempts that failed) since the start."""
        return self.running.totals()

    def dead_threads(self) -> list[threading.Thread]:
        """Slot threads that ended while the worker was not stopping."""
        return self.slots.dead_threads()

    def stuck_threads(self) -> int:
        """Threads still running a handler that was given up."""
        return self.running.stuck()

    # -- cancels and timeouts (runtime/cancel_watch.py, runtime/timeouts.py) --

    def request_stop(self, task_id: int, reason: str) -> bool:
        """Ask the running attempt ``task_id`` to stop; False when it does not run here."""
        return self.running.request_stop(task_id, reason)

    def abandon(self, task_id: int) -> RunningTask | None:
        """Give up a task whose handler does not return: whatever the handler does from now on
        changes nothing. The caller ends the task's session and settles the attempt, then
        calls ``given_up``. None when the handler finished meanwhile."""
        item = self.running.abandon(task_id, self.slots.leave_behind)
        if item is not None:
            self.wake(1)
        return item

    def given_up(self, item: RunningTask) -> None:
        """An abandoned task's session was ended and its attempt settled: the tasks its
        commit group held go back to the queue, an async handler's coroutine is cancelled."""
        self.drain.given_up(item)
        self.slots.given_up(item)

    # -- shutdown --

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no task runs, nor a commit group whose handlers returned is still to
        commit; False if some still run after ``timeout``."""
        return self.running.wait_idle(timeout, self.drain.open)

    def join(self, timeout: float) -> None:
        self.slots.join(timeout)
        self.session.close()  # its own connections, if it has any (db/postgres/held_session.py)

    def release_running(self, connect: Callable[[], Any]) -> int:
        """After the grace period: end the tasks still running and schedule them again at
        once (``release.py``); how many were released."""
        return release_running(
            self.running, self.failures, connect, self._terminate_session, self.drain.given_up
        )
