"""Task timeouts: ask a handler to stop, then give it up.

``TaskTimeouts.timeout_for(processo)`` says how long an attempt of that
``processo`` may run (QUEUE_TASK_TIMEOUT for every processo here; per-processo
values plug in there). ``TimeoutEnforcer.check()``, called by the lifecycle
thread, asks every task past its timeout to stop (``current_task()
.cancel_requested`` turns true, ``check_cancelled()`` raises). A handler that
has not returned QUEUE_TASK_TIMEOUT_GRACE seconds later is given up: its
database session is ended from another connection (its work rolls back, its
liveness lock goes), the attempt is recorded as failed with a ``mensagem``
starting "timeout" and retried by the queue's retry policy, and a new executor
thread takes its place. Whatever the old thread does afterwards changes
nothing; when more such threads are alive than QUEUE_CONCURRENCY, the worker
exits non-zero (``worker_runtime``) so that it is restarted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.context import TIMED_OUT
from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.runtime.executor import TaskExecutor
from nsj_queue_lib.runtime.running import RunningTask
from nsj_queue_lib.settings import Settings

logger = get_logger("timeouts")

SessionTerminator = Callable[[Any, Any], None]


class TaskTimeouts:
    """How long an attempt may run, by its ``processo``: ``@Task(timeout_s=)``, else
    ``QUEUE_TASK_TIMEOUT``."""

    def __init__(self, settings: Settings, per_processo: Mapping[str, float] | None = None):
        self.default = settings.queue_task_timeout
        self.per_processo = dict(per_processo or {})

    def timeout_for(self, processo: str | None) -> float | None:
        """Seconds an attempt of ``processo`` may run, or None (no limit)."""
        return self.per_processo.get(processo or "", self.default)

    def timeout_for_task(self, row: Mapping[str, Any]) -> float | None:
        """Seconds the attempt of the claimed ``row`` may run: the ``timeout_s`` it was
        enqueued with (docs/fleet-control.md), else its processo's."""
        override = row.get("timeout_s")
        return float(override) if override is not None else self.timeout_for(row.get("processo"))


def timeout_message(seconds: float) -> str:
    return f"timeout: the attempt ran longer than {seconds:g} s and was stopped"


class TimeoutEnforcer:
    def __init__(
        self,
        settings: Settings,
        executor: TaskExecutor,
        connect: Callable[[], Any],
        terminate_session: SessionTerminator,
        timeouts: TaskTimeouts | None = None,
    ):
        self.settings = settings
        self.executor = executor
        self._connect = connect  # a new autocommit connection
        self._terminate_session = terminate_session
        self.timeouts = timeouts or TaskTimeouts(settings)
        self.given_up = 0  # attempts given up since the start

    def check(self, now: float | None = None) -> None:
        """Ask the tasks past their timeout to stop; give up those past the grace period."""
        now = time.monotonic() if now is None else now
        for item in self.executor.running_tasks():
            limit = self.timeouts.timeout_for_task(item.task.row)
            if limit is None or now - item.started < limit:
                continue
            if item.timeout_message is None:
                item.timeout_message = timeout_message(limit)
                item.context.request_stop(TIMED_OUT)
                logger.warning(
                    "queue=%s task=%s: timed out after %g s; asked to stop",
                    self.settings.queue_name,
                    item.task.id,
                    limit,
                )
            if now - item.started >= limit + self.settings.queue_task_timeout_grace:
                given_up = self.executor.abandon(item.task.id)
                if given_up is not None:
                    self._give_up(given_up)

    def _give_up(self, item: RunningTask) -> None:
        """End the stuck handler's session and settle its attempt as a timeout."""
        logger.error(
            "queue=%s task=%s: the handler did not stop within %g s of its timeout; its "
            "session is ended and the attempt retried (a new executor thread takes its place)",
            self.settings.queue_name,
            item.task.id,
            self.settings.queue_task_timeout_grace,
        )
        self.given_up += 1
        admin = None
        try:
            admin = self._connect()
            self._terminate_session(admin, item.conn)
            self.executor.failures.fail_elsewhere(
                admin, item.task, item.timeout_message or timeout_message(0), model.FALHA
            )
        except Exception as exc:  # noqa: BLE001 - the retry service rescues the attempt
            logger.warning(
                "queue=%s task=%s: could not settle the timed-out attempt (%s); the retry "
                "service will rescue it",
                self.settings.queue_name,
                item.task.id,
                exc,
            )
        finally:
            close_quietly(admin)
        self.executor.session.after_settled(item.task)
        self.executor.failures.observer.attempt_abandoned(item.task, "given up after its timeout")
        self.executor.given_up(item)
