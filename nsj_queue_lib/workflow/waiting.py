"""``QueueClient.wait_for_task``: block until a task has finished, by polling its row.

Each look is one indexed read of the task's latest attempt (``task_view``), with
locking reads where the store has them (MySQL/MariaDB: they read the latest
committed rows whatever the caller's snapshot, REPEATABLE READ included; a row a
worker is settling is read right after that commit). Looks start 1 ms apart and
grow to ``MAX_INTERVAL``: a short task is seen within a few milliseconds of its
commit, a long one costs a few reads a second. No notification is used: the
client never opens a connection of its own, and a LISTEN on the caller's would
only be heard after the caller's own commits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.exceptions import NotFoundError

FIRST_INTERVAL = 0.001
MAX_INTERVAL = 0.005
GROWTH = 1.3


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
) -> Mapping[str, Any]:
    """``look()`` until it returns a finished row; ``TimeoutError`` after ``timeout_s``,
    ``NotFoundError`` for an unknown task."""
    if timeout_s < 0:
        raise ValueError(f"timeout_s must be >= 0, got {timeout_s}")
    deadline = clock() + timeout_s
    interval = FIRST_INTERVAL
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
        interval = min(interval * GROWTH, MAX_INTERVAL)
