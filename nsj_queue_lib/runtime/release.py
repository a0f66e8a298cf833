"""After the grace period: the tasks still running are ended and scheduled again at once.

Their backends are terminated (rolling back their work and freeing their
locks), then each attempt is recorded as 'falha_processando' with its next
attempt due now. Whatever fails here, the retry service rescues the task.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.observability import observer as outcomes
from nsj_queue_lib.runtime.failures import Failures
from nsj_queue_lib.runtime.running import RunningTask, RunningTasks

logger = get_logger("executor")

RELEASED_MESSAGE = "worker stopped before the task finished; released for a new attempt"
# Ends another connection's server session (the driver's terminate_session).
SessionTerminator = Callable[[Any, Any], None]


def release_running(
    running: RunningTasks,
    failures: Failures,
    connect: Callable[[], Any],
    terminate_session: SessionTerminator,
    given_up: Callable[[RunningTask], None],
) -> int:
    """Release what still runs; how many were released. ``given_up``: the groups of the
    attempts released here give their other tasks back (those went with the sessions)."""
    # The release settles these attempts: their threads, woken by the end of their
    # sessions, must not settle them too (as a lost connection, counted as a failure).
    tasks, releasing = running.releasing()
    if not tasks:
        return 0
    released = 0
    admin = connect()  # autocommit
    try:
        for item in tasks:
            try:
                terminate_session(admin, item.conn)
            except Exception as exc:  # noqa: BLE001 - best effort: the retry service rescues the task
                logger.warning(
                    "queue=%s task=%s: could not stop its session: %s",
                    failures.queue_name,
                    item.task.id,
                    exc,
                )
        # Only the groups of the attempts released here: a FINISHING task's thread goes on
        # settling its own group (its commit fails with the session), and settling it from
        # here too would race with it.
        for item in releasing:
            given_up(item)
        for item in releasing:
            if _release(failures, admin, item):
                released += 1
    finally:
        admin.close()
    return released


def _release(failures: Failures, admin: Any, item: RunningTask) -> bool:
    next_id = failures.fail_elsewhere(
        admin, item.task, RELEASED_MESSAGE, model.FALHA_PROCESSANDO, delay_seconds=0.0
    )
    if next_id is not None:
        failures.observer.task_finished(item.task, outcomes.RELEASED)
    return next_id is not None
