"""``current_task()``: the running task's context, for the handler that runs it.

The worker sets the context around each handler call in a ``contextvars``
variable, so it follows the handler into coroutines and into threads started
with a copied context (``asyncio.to_thread``, ``contextvars.copy_context().run``).
The context holds the cancel request (set by the worker when the task is
cancelled or times out) and the last progress reported; the worker writes that
progress on a connection of its own, a few times per second at most
(``runtime/progress.py``), never on the handler's.
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from nsj_queue_lib.exceptions import NoCurrentTaskError, TaskCancelled
from nsj_queue_lib.model import MENSAGEM_LIMIT

MAX_COUNT = 2**63 - 1  # progress columns are bigint
# Why a task was asked to stop.
CANCEL_REQUESTED = "cancel"
TIMED_OUT = "timeout"

_current: contextvars.ContextVar[TaskContext | None] = contextvars.ContextVar(
    "nsj_queue_lib_current_task", default=None
)


@dataclasses.dataclass(frozen=True)
class Progress:
    done: int
    total: int | None
    message: str | None


class TaskContext:
    """What a handler can ask of and tell about its running task (thread-safe)."""

    def __init__(self, task_id: int, id_inicial: int | None = None):
        self.id = task_id  # this attempt's id (tarefa["id"])
        self.id_inicial = id_inicial or task_id  # the task's first attempt (insert_task's id)
        self._lock = threading.Lock()
        self._stop_reason: str | None = None
        self._progress: Progress | None = None
        self._unwritten = False
        self.checkpoints = 0  # a pipeline's yields so far (runtime/pipeline.py)
        self.last_checkpoint: float | None = None  # time.monotonic() of the last one
        # The handler's connection and its queue table, while it runs (workflow/handler.py).
        self.bd_conn: Any = None
        self.queue_table: str | None = None
        self.workflow_client: Any = None  # a QueueClient on bd_conn, built on first use
        # How a durable step or wait commits in the middle of the handler, set by the drain
        # that runs it (runtime/handler_commits.py); None where there are none (async).
        self.commits: Any = None
        self.wait_counts: dict[str, int] = {}  # durable waits met so far (workflow/waits.py)
        self.in_step = False  # a durable step's fn is running (steps and waits do not nest)
        # Set by a durable wait that ended the attempt: the attempt's outcome, whatever the
        # handler does after it (it may catch TaskSuspended).
        self.suspension: BaseException | None = None
        # A durable pipeline's yields committed by earlier attempts (workflow/steps.py).
        self.durable_yields = 0
        # The task's process, while a task of a process runs (nsj_queue_lib/process/).
        self.process: Any = None
        # What the process tasks of its commit group share (process/batch.py), or None.
        self.process_batch: Any = None
        # Its kind ('start', 'call', 'repair', 'timer'), kept after the handler for the
        # metrics (observability/measured.py): ``process`` is None again by then.
        self.process_kind: str | None = None

    # -- workflows (nsj_queue_lib/workflow/handler.py) --

    def parents(self) -> dict[int, dict[str, Any]]:
        """Each parent named in this task's ``after=``: {id: {"status", "mensagem", ...}}
        (``get_task``'s dict of its latest attempt); ``{}`` for a task without parents."""
        from nsj_queue_lib.workflow.handler import parents

        return parents(self)

    def spawn(self, processo: str, payload: Any, after: Any = None, **insert_options: Any) -> int:
        """Enqueue a task in the handler's own transaction (it exists exactly when this
        task's success commits); ``after``: ids it waits for. Returns its id."""
        from nsj_queue_lib.workflow.handler import spawn

        return spawn(self, processo, payload, after, **insert_options)

    # -- durable steps and waits (nsj_queue_lib/workflow/steps.py, waits.py) --

    def step(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` once per task: the first time, what it writes on ``bd_conn``
        commits together with its result (a JSON value) when the step returns; any later
        attempt of the task gets that result back without running ``fn``. Returns the
        result as JSON gives it back (a tuple as a list)."""
        from nsj_queue_lib.workflow.steps import step

        return step(self, name, fn, *args)

    def sleep(self, seconds: float) -> None:
        """Durable sleep: commits the work so far and ends this attempt without failing it
        (the executor is free meanwhile); the task runs again from the handler's start
        once ``seconds`` have passed, and this call then returns."""
        from nsj_queue_lib.workflow.waits import sleep

        sleep(self, seconds)

    def wait_event(self, name: str, timeout_s: float) -> Any:
        """The payload of the event ``name`` sent to this task (``QueueClient.send_event``);
        until it arrives, as ``sleep``, the attempt ends and the task resumes when it does.
        ``TimeoutError`` once ``timeout_s`` has passed without it."""
        from nsj_queue_lib.workflow.waits import wait_event

        return wait_event(self, name, timeout_s)

    # -- cancellation --

    @property
    def cancel_requested(self) -> bool:
        """Whether the task was asked to stop (cancelled, or its timeout expired)."""
        return self._stop_reason is not None

    @property
    def stop_reason(self) -> str | None:
        """``"cancel"``, ``"timeout"``, or None while nobody asked the task to stop."""
        return self._stop_reason

    def check_cancelled(self) -> None:
        """Raise ``TaskCancelled`` if the task was asked to stop."""
        reason = self._stop_reason
        if reason is not None:
            what = "timed out" if reason == TIMED_OUT else "was cancelled"
            raise TaskCancelled(f"task {self.id_inicial} {what}")

    def request_stop(self, reason: str) -> bool:
        """Ask the handler to stop; False when it was asked already (the first reason stays)."""
        with self._lock:
            if self._stop_reason is not None:
                return False
            self._stop_reason = reason
            return True

    def heartbeat(self) -> None:
        """A pipeline reached a checkpoint (a ``yield``): record when."""
        self.checkpoints += 1
        self.last_checkpoint = time.monotonic()

    # -- progress --

    def report_progress(
        self, done: int, total: int | None = None, message: str | None = None
    ) -> None:
        """Record how far the task got; other sessions see it within a second.

        ``done`` and ``total`` are whole numbers, ``0 <= done <= total``; ``message``
        at most 500 characters. Bad values raise ``ValueError`` (``TypeError`` for
        a wrong type) and record nothing. Calling often is cheap: only the last
        value is written, at most a few times per second.
        """
        progress = Progress(_count("done", done), _optional_count("total", total), message)
        if progress.total is not None and progress.done > progress.total:
            raise ValueError(f"done ({done}) cannot exceed total ({total})")
        if message is not None:
            if not isinstance(message, str):
                raise TypeError(f"message must be a str or None, got {type(message).__name__}")
            if len(message) > MENSAGEM_LIMIT:
                raise ValueError(f"message is longer than {MENSAGEM_LIMIT} characters")
        with self._lock:
            self._progress = progress
            self._unwritten = True

    @property
    def progress(self) -> Progress | None:
        return self._progress

    def take_unwritten_progress(self) -> Progress | None:
        """The progress reported since the last call, if any (for the writer)."""
        with self._lock:
            if not self._unwritten:
                return None
            self._unwritten = False
            return self._progress

    def progress_not_written(self) -> None:
        """The writer failed: keep the value for its next round."""
        with self._lock:
            self._unwritten = True


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value <= MAX_COUNT:
        raise ValueError(f"{name} must be between 0 and {MAX_COUNT}, got {value}")
    return value


def _optional_count(name: str, value: object) -> int | None:
    return None if value is None else _count(name, value)


def current_task() -> TaskContext:
    """The context of the task whose handler is running here; ``NoCurrentTaskError``
    (a ``LookupError``) outside a handler."""
    context = _current.get()
    if context is None:
        raise NoCurrentTaskError(
            "current_task() is only available inside a task handler run by a worker"
        )
    return context


class _Running:
    """``with running(context):`` - a class rather than a ``@contextmanager`` generator: it
    wraps every handler call, and the generator's machinery costs the worker a few Python
    calls per task more (docs/benchmarks.md)."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: TaskContext):
        self._context = context

    def __enter__(self) -> TaskContext:
        self._token = _current.set(self._context)
        return self._context

    def __exit__(self, *exc_info: object) -> None:
        _current.reset(self._token)


def running(context: TaskContext) -> _Running:
    """Make ``context`` the current task for the code run inside (the worker's handler call)."""
    return _Running(context)
