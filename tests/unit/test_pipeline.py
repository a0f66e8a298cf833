"""Pipelines' checkpoints (runtime/pipeline.py, issue 18 item 3), without a database.

A generator handler runs step by step; at each ``yield`` the worker records a
heartbeat and the progress the value carries, and raises ``TaskCancelled``
into the generator when the task was asked to stop or its deadline passed.
The real worker's side (one commit, kill -9, both databases) is in
tests/contract/test_pipelines.py.
"""

from __future__ import annotations

import asyncio
import datetime

import pytest

from nsj_queue_lib import QueueClient, Task, TaskCancelled, WorkerBase, current_task
from nsj_queue_lib.context import CANCEL_REQUESTED, TIMED_OUT, Progress, TaskContext
from nsj_queue_lib.runtime.failures import TaskTimeout
from nsj_queue_lib.runtime.pipeline import Checkpoints, _run, _run_async, run_pipeline
from nsj_queue_lib.testing import InMemoryQueue

UTC = datetime.timezone.utc


def context() -> TaskContext:
    return TaskContext(7, 5)


# Every case runs twice: the generator as written (sync), and the same steps behind an
# async generator, which the worker runs with ``_run_async``.
FLAVORS = pytest.mark.parametrize("flavor", ["sync", "async"])


async def asynchronous(steps):
    """``steps`` as an async generator: what the worker throws into it, or its ``aclose``,
    reaches ``steps`` at its ``yield``. (An async generator returns no value.)"""
    try:
        value = next(steps)
        while True:
            await asyncio.sleep(0)
            try:
                yield value
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:  # TaskCancelled, TypeError...: passed on
                value = steps.throw(exc)
            else:
                value = next(steps)
    except StopIteration:
        return


def drive(flavor, steps, task, timeout_s=None, clock=None):
    """Run ``steps`` as the worker runs a pipeline of that flavor; its mensagem."""
    if clock is None:
        run = run_pipeline(steps if flavor == "sync" else asynchronous(steps), task, timeout_s)
        return run if flavor == "sync" else until_complete(run)
    checkpoints = Checkpoints(task, timeout_s, clock)
    if flavor == "sync":
        return _run(steps, checkpoints)
    return until_complete(_run_async(asynchronous(steps), checkpoints))


def until_complete(run):
    """Await ``run`` in a new event loop, closed without finalizing the async generators
    left open (as ``asyncio.run`` would): a pipeline the worker failed to close stays open."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run)
    finally:
        loop.close()


@FLAVORS
def test_each_shape_of_yield_records_progress_and_a_heartbeat(flavor):
    seen = []

    def steps():
        yield  # a bare checkpoint
        seen.append(current_progress())
        yield (1, 4)
        seen.append(current_progress())
        yield (2, 4, "second")
        seen.append(current_progress())
        yield 3  # a count: the total and message stay
        seen.append(current_progress())
        yield "almost"  # a message: the counts stay
        seen.append(current_progress())
        return "done"

    task = context()

    def current_progress():
        return task.progress

    # An async generator returns nothing: its mensagem is the last message it yielded.
    assert drive(flavor, steps(), task) == ("done" if flavor == "sync" else "almost")
    assert seen == [
        None,
        Progress(1, 4, None),
        Progress(2, 4, "second"),
        Progress(3, 4, "second"),
        Progress(3, 4, "almost"),
    ]
    assert task.checkpoints == 5 and task.last_checkpoint is not None


@FLAVORS
def test_the_mensagem_is_the_return_value_else_the_last_message_yielded_else_none(flavor):
    def returns():
        yield "a"
        return 42

    def messages():
        yield (1, 2, "first")
        yield "last words"
        yield 2

    def silent():
        yield (1, 1)

    assert drive(flavor, returns(), context()) == (42 if flavor == "sync" else "a")
    assert drive(flavor, messages(), context()) == "last words"
    assert drive(flavor, silent(), context()) is None


@FLAVORS
def test_a_value_of_another_shape_is_raised_into_the_generator_at_its_yield(flavor):
    caught = []

    def steps():
        for bad in (1.5, [1, 2], (1, 2, 3, 4), True, (5, 2)):
            try:
                yield bad
            except (TypeError, ValueError) as exc:
                caught.append(type(exc).__name__)
        yield "survived"

    assert drive(flavor, steps(), context()) == "survived"
    assert caught == ["TypeError", "TypeError", "TypeError", "TypeError", "ValueError"]


@FLAVORS
def test_a_bad_value_the_generator_does_not_catch_fails_it(flavor):
    def steps():
        yield {"done": 1}

    with pytest.raises(TypeError, match="a pipeline yields"):
        drive(flavor, steps(), context())


@FLAVORS
def test_a_cancel_request_is_raised_into_the_generator_at_the_next_yield(flavor):
    task = context()
    trace = []

    def steps():
        try:
            yield 1
            task.request_stop(CANCEL_REQUESTED)  # as the worker does when cancel_task runs
            trace.append("asked")
            yield 2
            trace.append("never")
        except TaskCancelled:
            trace.append("cancelled")
            raise

    with pytest.raises(TaskCancelled, match="task 5 was cancelled"):
        drive(flavor, steps(), task)
    assert trace == ["asked", "cancelled"]
    assert task.progress == Progress(2, None, None)  # the checkpoint recorded it first


@FLAVORS
def test_a_generator_that_yields_again_after_the_cancel_is_closed(flavor):
    task = context()
    trace = []

    def steps():
        try:
            yield 1
            task.request_stop(CANCEL_REQUESTED)
            try:
                yield 2
            except TaskCancelled:
                trace.append("ignored")
            yield 3  # yields again: closed here
            trace.append("never")
        finally:
            trace.append("closed")

    with pytest.raises(TaskCancelled):
        drive(flavor, steps(), task)
    assert trace == ["ignored", "closed"]


@FLAVORS
def test_a_generator_that_returns_after_the_cancel_still_ends_cancelled(flavor):
    task = context()

    def steps():
        task.request_stop(CANCEL_REQUESTED)
        try:
            yield
        except TaskCancelled:
            return "cleaned up"

    with pytest.raises(TaskCancelled):
        drive(flavor, steps(), task)


@FLAVORS
def test_a_generator_that_keeps_yielding_while_being_closed_is_given_up(flavor):
    task = context()
    ignored = []

    def steps():
        task.request_stop(CANCEL_REQUESTED)
        while len(ignored) < 3:  # then it lets the garbage collector close it
            try:
                yield
            except BaseException as exc:  # the misuse under test: GeneratorExit too
                ignored.append(type(exc).__name__)

    with pytest.raises(TaskCancelled):
        drive(flavor, steps(), task)
    # (The garbage collector's close may have come since: a third GeneratorExit.)
    assert ignored[:2] == ["TaskCancelled", "GeneratorExit"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@FLAVORS
def test_the_deadline_is_checked_at_each_checkpoint_and_ends_in_a_timeout(flavor):
    clock = Clock()
    task = context()
    seen = []

    def steps():
        yield 1
        clock.now += 4.9
        yield 2  # still within the 5 s
        clock.now += 0.2
        try:
            yield 3
        except TaskCancelled as exc:
            seen.append(str(exc))
            raise RuntimeError("cleanup failed") from None

    with pytest.raises(TaskTimeout, match="^timeout: the attempt ran longer than 5 s"):
        drive(flavor, steps(), task, 5.0, clock)
    assert seen == ["task 5 timed out"]


@FLAVORS
def test_a_timeout_the_worker_noticed_is_raised_as_a_stop_request_too(flavor):
    task = context()

    def steps():
        task.request_stop(TIMED_OUT)  # the timeout enforcer, between two checkpoints
        yield

    with pytest.raises(TaskCancelled, match="timed out"):
        drive(flavor, steps(), task, 60.0)  # the executor turns it into TaskTimeout


# -- the in-memory queue runs pipelines as a worker does ----------------------------------


class Export(WorkerBase):
    @Task("export", max_retry=2)
    def export(self, payload, tarefa, bd_conn):
        client = QueueClient(bd_conn, "public.fila")
        key = tarefa["chave_externa"]
        for page in range(1, 4):
            client.insert_task("export", "mail", "page_done", f"{key}-{page}", {})
            if key == "fails" and page == 2:
                raise RuntimeError("page 2 failed")
            yield (page, 3, f"page {page}")
        return "exported"

    @Task("export_async")
    async def export_async(self, payload, tarefa, bd_conn):
        for page in range(1, 3):
            await asyncio.sleep(0)
            yield (page, 2, f"async page {page}")

    @Task("stops")
    def stops(self, payload, tarefa, bd_conn):
        yield 1
        current_task().request_stop(CANCEL_REQUESTED)  # stands in for cancel_task
        yield 2

    def execute(self, payload, tarefa, bd_conn):
        return "ok"


def test_the_in_memory_queue_runs_pipelines_committing_their_work_once():
    queue = InMemoryQueue(now=datetime.datetime(2026, 1, 1, tzinfo=UTC))
    client = QueueClient(queue.connection(), "public.fila")
    ok = client.insert_task("t", "d", "export", "ok", {})
    fails = client.insert_task("t", "d", "export", "fails", {})
    both = client.insert_task("t", "d", "export_async", "a", {})
    stopped = client.insert_task("t", "d", "stops", "s", {})
    queue.run(Export())
    row = queue.task(ok)
    assert (row["status"], row["mensagem"]) == ("sucesso", "exported")
    assert (row["progress_done"], row["progress_total"], row["progress_message"]) == (
        3,
        3,
        "page 3",
    )
    assert [
        t["status"] for t in queue.tasks(processo="export", chave_externa="fails", dead=False)
    ] == [
        "falha",
        "falha",
    ]
    # Follow-up tasks: only those of the pipeline that succeeded, none of the failed attempts.
    assert sorted(t["chave_externa"] for t in queue.tasks(processo="page_done")) == [
        "ok-1",
        "ok-2",
        "ok-3",
    ]
    assert queue.task(fails)["progress_done"] == 1  # the last progress stays on the attempt
    assert queue.task(both)["mensagem"] == "async page 2"
    assert queue.task(stopped)["status"] == "cancelada"
