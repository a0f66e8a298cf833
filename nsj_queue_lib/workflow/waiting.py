"""``QueueClient.wait_for_task``: block until a task has finished.

Each look is one indexed read of the task's latest attempt (``task_view``), with
locking reads where the store has them (MySQL/MariaDB: they read the latest
committed rows whatever the caller's snapshot, REPEATABLE READ included; a row a
worker is settling is read right after that commit).

On PostgreSQL a wait that lasts is pushed (``wait_pushed``): after ``POLL_FIRST`` of
polling, the caller's idle connection LISTENs for the queue's task ends and says it
waits (``db/postgres/task_end.py``); the end trigger's NOTIFY arrives at the commit that
ends the task, and the next look returns it. Looks still run at polling's pace for a
few milliseconds after the LISTEN (a task whose end was being written meanwhile sent
no NOTIFY), then every ``PUSHED_INTERVAL`` in case a notification was missed.
Elsewhere, and on a connection inside a transaction, it polls (``wait_for``): looks
start 1 ms apart and grow to ``MAX_INTERVAL``, so a short task is seen within a few
milliseconds of its commit; after ``LONG_AFTER`` they grow to ``LONG_INTERVAL``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.db.queue_store import EndWaiter
from nsj_queue_lib.exceptions import NotFoundError

FIRST_INTERVAL = 0.001
MAX_INTERVAL = 0.005
GROWTH = 1.3
# A wait that has lasted LONG_AFTER seconds looks at most every LONG_INTERVAL: a task that
# runs that long is seen within a tenth of its run, and a waiter costs 10 reads a second,
# not 200 (an HTTP ?wait= of 300 s holds its look-ups for all of it).
LONG_AFTER = 1.0
LONG_INTERVAL = 0.1
# With a LISTEN, how often a look runs anyway (a notification lost between a look and the
# wait, a trigger disabled meanwhile): never slower than this behind a missed NOTIFY.
PUSHED_INTERVAL = 0.05
# How long a wait polls before it LISTENs. A LISTEN registered right after the task's
# enqueue competes with the worker being woken to claim it: measured, the pickup of a
# short task took 1.5 to 2 ms longer, more than the push saves (bench_workflow.py). A
# task that ends within this is seen by polling; a longer one is pushed.
POLL_FIRST = 0.02


def finished(row: Mapping[str, Any]) -> bool:
    """Whether a task's latest attempt ends it: 'sucesso', 'cancelada', or a failure with
    no attempt after it (its retries ran out)."""
    status = row["status"]
    if status in (model.SUCESSO, model.CANCELADA):
        return True
    return status in (model.FALHA, model.FALHA_PROCESSANDO) and not row["reenfileirado"]


def wait_for(
    look: Callable[[], Mapping[str, Any] | None],
    task_id: int,
    timeout_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    intervals: tuple[float, float] = (FIRST_INTERVAL, MAX_INTERVAL),
    deadline: float | None = None,
) -> Mapping[str, Any]:
    """``look()`` until it returns a finished row, ``sleep``-ing between looks (from
    ``intervals[0]`` growing to ``intervals[1]``); ``TimeoutError`` after ``timeout_s``
    (or at ``deadline``, on ``clock``, when given), ``NotFoundError`` for an unknown task."""
    if timeout_s < 0:
        raise ValueError(f"timeout_s must be >= 0, got {timeout_s}")
    if deadline is None:
        deadline = clock() + timeout_s
    interval, longest = intervals
    slow_from = clock() + LONG_AFTER
    while True:
        row = look()
        if row is None:
            raise NotFoundError(f"task {task_id} not found")
        if finished(row):
            return row
        remaining = deadline - clock()
        if remaining <= 0:
            raise TimeoutError(f"task {task_id} is still {row['status']} after {timeout_s} s")
        sleep(min(interval, remaining))
        if clock() >= slow_from:
            longest = max(longest, LONG_INTERVAL)
        interval = min(interval * GROWTH, longest)


def wait_pushed(
    look: Callable[[], Mapping[str, Any] | None],
    waiter: EndWaiter,
    task_id: int,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> Mapping[str, Any]:
    """``wait_for`` woken by ``waiter``'s notifications, after ``POLL_FIRST`` of polling.

    ``waiter.register`` runs a look (as ``look`` does) with the registration.
    ``task_id`` is taken for the first attempt's id (what insert_task returns); another
    attempt's id registers again under its first's. Then a look after each wake-up:
    when the task's own end was heard, with the waiter's close in the same round trip.
    It polls where ``register`` says no NOTIFY will come. The waiter is closed whatever
    happens."""
    if timeout_s < 0:
        raise ValueError(f"timeout_s must be >= 0, got {timeout_s}")
    deadline = clock() + timeout_s

    def ended_look() -> Mapping[str, Any] | None:
        try:
            return look()
        finally:
            waiter.end_look()

    try:
        try:
            return wait_for(ended_look, task_id, min(POLL_FIRST, timeout_s), clock=clock)
        except TimeoutError:
            if clock() >= deadline:
                raise
        pushed, row = waiter.register(task_id)
        if row is not None and not finished(row) and int(row["id_inicial"]) != task_id:
            waiter.unregister()  # a later attempt's id: the trigger names the first's
            pushed, row = waiter.register(int(row["id_inicial"]))
        if not pushed:
            return wait_for(ended_look, task_id, timeout_s, clock=clock, deadline=deadline)
        return _wait_registered(ended_look, waiter, row, task_id, timeout_s, clock, deadline)
    finally:
        waiter.close()


def _wait_registered(
    ended_look: Callable[[], Mapping[str, Any] | None],
    waiter: EndWaiter,
    row: Mapping[str, Any] | None,
    task_id: int,
    timeout_s: float,
    clock: Callable[[], float],
    deadline: float,
) -> Mapping[str, Any]:
    """``wait_pushed``'s wait once ``waiter`` is registered (``row``: its look)."""
    heard = [False]  # whether the last wait heard the task's own end
    registered = [row]  # the registration's look comes first

    def pushed_look() -> Mapping[str, Any] | None:
        if registered:
            return registered.pop()
        if not heard[0]:
            return ended_look()
        found = waiter.look_and_close()  # the look and the close, one round trip
        if found is not None and not finished(found):  # a failure, a retry ahead
            return waiter.register(int(found["id_inicial"]))[1]
        return found

    def pushed_sleep(seconds: float) -> None:
        heard[0] = waiter.wait(seconds)

    # Looks as often as polling's at first: a task whose end was being written when the
    # waiter registered (its trigger ran before, its commit comes after) sent no NOTIFY;
    # its commit follows within milliseconds. Then a look every PUSHED_INTERVAL at most:
    # a NOTIFY wakes the wait at once.
    return wait_for(
        pushed_look,
        task_id,
        timeout_s,
        sleep=pushed_sleep,
        clock=clock,
        intervals=(FIRST_INTERVAL, PUSHED_INTERVAL),
        deadline=deadline,
    )
