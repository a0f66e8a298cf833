"""Pipelines: a handler that is a generator (or an async generator) runs step by step.

``WorkerBase.handle_task`` hands the generator its method returned to
``run_pipeline``, inside the task's transaction and with the task's
``current_task()`` context, so the whole pipeline commits once, with the
task, as any handler's work does. Each ``yield`` is a checkpoint where the
worker:

1. records a heartbeat on the task's context (``checkpoints``,
   ``last_checkpoint``). Liveness itself needs nothing here: it is the
   session lock the task's connection holds for as long as the worker lives;
2. records the progress the yielded value carries (``PROGRESS_SHAPES``);
   a value of another shape raises ``TypeError`` into the generator at its
   ``yield``, a bad count ``ValueError``;
3. checks the attempt's deadline (``timeout_s`` or QUEUE_TASK_TIMEOUT,
   counted from the start of the pipeline) and its stop request (a cancel,
   or the timeout enforcer's), and raises ``TaskCancelled`` into the
   generator at its ``yield`` when either is due.

A generator that yields again after ``TaskCancelled`` was raised into it is
closed. Whether it then raises, returns or yields, the attempt ends as
stopped, never committed ('cancelada' for a cancel, a failure starting
"timeout" for a timeout). The pipeline's ``mensagem`` is what the generator returns (a sync
generator's ``return`` value); when that is None (always, for an async
generator, which cannot return a value), the last message it yielded; else
the worker's default.
"""

from __future__ import annotations

import time
import types
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator
from typing import Any

from nsj_queue_lib.context import TaskContext
from nsj_queue_lib.exceptions import TaskCancelled
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.runtime.failures import TaskTimeout
from nsj_queue_lib.runtime.timeouts import timeout_message
from nsj_queue_lib.workflow import steps as durable_steps

logger = get_logger("pipeline")
_PIPELINE_TYPES = (types.GeneratorType, types.AsyncGeneratorType)

PROGRESS_SHAPES = (
    "None (a bare yield), done (int), a message (str), (done, total) or (done, total, message)"
)


def is_pipeline(result: Any) -> bool:
    """Whether a handler's result is a pipeline to run (a generator or an async generator)."""
    # What inspect.isgenerator and inspect.isasyncgen test, in one call: this runs once per
    # task, on the executor's critical path.
    return isinstance(result, _PIPELINE_TYPES)


def run_pipeline(
    steps: Generator[Any, None, Any] | AsyncGenerator[Any, None],
    context: TaskContext,
    timeout_s: float | None,
    durable: bool = False,
) -> str | None | Coroutine[Any, Any, str | None]:
    """Run ``steps``: its ``mensagem`` (None: the default); for an async generator, the
    coroutine that runs it (the worker awaits it as an ``async def`` handler's).
    ``durable`` (``@Task(durable_steps=True)``): each yield commits (workflow/steps.py)."""
    checkpoints = Checkpoints(context, timeout_s)
    if durable:
        if isinstance(steps, AsyncGenerator):
            raise TypeError("durable_steps needs a synchronous generator handler")
        checkpoints.durable = True
        # Before the generator's body runs: it reads how far earlier attempts got.
        context.durable_yields = durable_steps.yields_done(context)
    if isinstance(steps, AsyncGenerator):
        return _run_async(steps, checkpoints)
    return _run(steps, checkpoints)


class Checkpoints:
    """What the worker does at a pipeline's ``yield`` (shared by the sync and async runs)."""

    def __init__(
        self,
        context: TaskContext,
        timeout_s: float | None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.context = context
        self.timeout_s = timeout_s
        self._clock = clock
        self._deadline = None if timeout_s is None else clock() + timeout_s
        self.message: str | None = None  # the last message yielded
        self.stop: TaskCancelled | None = None  # raised into the generator
        self.timed_out = False
        self.durable = False  # each yield commits (run_pipeline's durable)
        self.yields = 0  # this run's yields

    def reached(self, value: Any) -> BaseException | None:
        """A ``yield value``: the exception to raise into the generator there, or None to
        resume it."""
        self.context.heartbeat()
        try:
            self._record(value)
        except (TypeError, ValueError) as exc:
            return exc
        self.stop = self._stop_request()
        if self.stop is None and self.durable:
            # Not when stopping: a cancelled or timed-out attempt commits nothing more.
            self.yields += 1
            durable_steps.keep_yield(self.context, self.context.durable_yields + self.yields, value)
        return self.stop

    def _record(self, value: Any) -> None:
        if value is None:
            return
        last = self.context.progress
        done, total = (last.done, last.total) if last is not None else (0, None)
        message = last.message if last is not None else None
        if isinstance(value, str):
            message = value
        elif isinstance(value, int) and not isinstance(value, bool):
            done = value
        elif isinstance(value, tuple) and len(value) in (2, 3):
            done, total, message = value if len(value) == 3 else (*value, None)
        else:
            raise TypeError(
                f"a pipeline yields {PROGRESS_SHAPES}; got {type(value).__name__} {value!r:.80}"
            )
        self.context.report_progress(done, total, message)
        if message is not None:
            self.message = message

    def _stop_request(self) -> TaskCancelled | None:
        if self._deadline is not None and self._clock() >= self._deadline:
            self.timed_out = True
            return TaskCancelled(f"task {self.context.id_inicial} timed out")
        try:
            self.context.check_cancelled()
        except TaskCancelled as exc:
            return exc
        return None

    def finished(self, returned: Any) -> Any:
        """The generator returned: its ``mensagem``, unless it was stopped."""
        if self.stop is not None:
            raise self.stopped()
        return returned if returned is not None else self.message

    def failed(self, error: BaseException) -> None:
        """The generator raised ``error`` (re-raised by the caller): past the deadline, the
        attempt fails as a timeout whatever it raised (not a cancelled coroutine: the worker
        cancels one it gave up, or stops its event loop)."""
        if self.timed_out and isinstance(error, Exception):
            raise self.stopped() from error

    def stopped(self) -> BaseException:
        """What the stopped attempt ends with."""
        if self.timed_out:
            return TaskTimeout(timeout_message(self.timeout_s or 0))
        assert self.stop is not None
        return self.stop

    def ignored_stop(self) -> BaseException:
        """It yielded again after ``TaskCancelled`` was raised into it, and was closed."""
        logger.warning(
            "task=%s: the pipeline yielded again after TaskCancelled was raised into it; "
            "it was closed",
            self.context.id,
        )
        return self.stopped()


def _run(steps: Generator[Any, None, Any], checkpoints: Checkpoints) -> Any:
    error: BaseException | None = None
    while True:
        try:
            value = steps.send(None) if error is None else steps.throw(error)
        except StopIteration as end:
            return checkpoints.finished(end.value)
        except BaseException as exc:
            checkpoints.failed(exc)
            raise
        if checkpoints.stop is not None:
            _close(steps.close, checkpoints)
            raise checkpoints.ignored_stop()
        error = checkpoints.reached(value)


async def _run_async(steps: AsyncGenerator[Any, None], checkpoints: Checkpoints) -> Any:
    error: BaseException | None = None
    while True:
        try:
            value = await (steps.asend(None) if error is None else steps.athrow(error))
        except StopAsyncIteration:
            return checkpoints.finished(None)
        except BaseException as exc:
            checkpoints.failed(exc)
            raise
        if checkpoints.stop is not None:
            try:
                await steps.aclose()
            except Exception as exc:  # noqa: BLE001 - it yielded in its finally too: logged
                _close_failed(exc, checkpoints)
            raise checkpoints.ignored_stop()
        error = checkpoints.reached(value)


def _close(close: Callable[[], None], checkpoints: Checkpoints) -> None:
    try:
        close()
    except Exception as exc:  # noqa: BLE001 - it yielded in its finally too: logged
        _close_failed(exc, checkpoints)


def _close_failed(error: BaseException, checkpoints: Checkpoints) -> None:
    logger.warning(
        "task=%s: closing the pipeline failed: %s: %s",
        checkpoints.context.id,
        type(error).__name__,
        error,
    )
