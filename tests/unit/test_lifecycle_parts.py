"""The pure parts of a task's life cycle: the handler's context, its progress and cancel
request, the cancel notifications' payloads, the timeout settings, the progress writer."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from typing import Any

import pytest

import nsj_queue_lib
from nsj_queue_lib.cancel_notice import cancel_payload, cancelled_ids
from nsj_queue_lib.context import CANCEL_REQUESTED, TIMED_OUT, TaskContext, current_task, running
from nsj_queue_lib.exceptions import ConfigError, NoCurrentTaskError, TaskCancelled
from nsj_queue_lib.runtime import progress as progress_module
from nsj_queue_lib.runtime.progress import ProgressWriter
from nsj_queue_lib.runtime.timeouts import TaskTimeouts, timeout_message
from nsj_queue_lib.settings import Settings

DB = {"DB_HOST": "h", "DB_BASE": "b", "DB_USER": "u", "QUEUE_NAME": "q", "QUEUE_TABLE": "q"}


def test_the_public_names():
    assert nsj_queue_lib.current_task is current_task
    assert issubclass(nsj_queue_lib.TaskCancelled, Exception)
    assert issubclass(NoCurrentTaskError, LookupError)


def test_current_task_outside_a_handler_is_a_clear_error():
    with pytest.raises(NoCurrentTaskError, match="inside a task handler"):
        current_task()


def test_the_context_follows_coroutines_and_copied_contexts_not_bare_threads():
    context = TaskContext(7, None)
    seen: dict[str, object] = {}

    async def coroutine() -> int:
        await asyncio.sleep(0)
        return current_task().id

    def in_thread(key: str) -> None:
        try:
            seen[key] = current_task().id
        except NoCurrentTaskError:
            seen[key] = None

    with running(context):
        assert current_task() is context and context.id_inicial == 7
        assert asyncio.run(coroutine()) == 7
        copied = threading.Thread(target=contextvars.copy_context().run, args=(in_thread, "copy"))
        bare = threading.Thread(target=in_thread, args=("bare",))
        for thread in (copied, bare):
            thread.start()
            thread.join()
    assert seen == {"copy": 7, "bare": None}
    with pytest.raises(NoCurrentTaskError):
        current_task()


def test_a_stop_request_is_seen_and_the_first_reason_stays():
    context = TaskContext(3, 1)
    assert not context.cancel_requested
    context.check_cancelled()  # nothing asked yet
    assert context.request_stop(TIMED_OUT) is True
    assert context.request_stop(CANCEL_REQUESTED) is False
    assert context.cancel_requested and context.stop_reason == TIMED_OUT
    with pytest.raises(TaskCancelled, match="task 1 timed out"):
        context.check_cancelled()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((-1,), ValueError),
        ((5, 4), ValueError),
        ((1, -2), ValueError),
        ((2**63,), ValueError),
        ((True,), TypeError),
        ((1.5,), TypeError),
        ((1, "10"), TypeError),
        ((1, 10, 5), TypeError),
        ((1, 10, "x" * 501), ValueError),
    ],
)
def test_bad_progress_raises_and_records_nothing(args, error):
    context = TaskContext(1)
    context.report_progress(1, 2, "before")
    context.take_unwritten_progress()
    with pytest.raises(error):
        context.report_progress(*args)
    assert context.take_unwritten_progress() is None
    assert context.progress is not None and context.progress.message == "before"


class _Pool:
    def __init__(self) -> None:
        self.taken = 0

    @contextlib.contextmanager
    def connection(self):
        self.taken += 1
        yield "conn"


class _Store:
    def __init__(self, fail: bool = False) -> None:
        self.written: list[tuple] = []
        self.fail = fail

    def report_progress(self, conn, task_id, done, total, message):
        if self.fail:
            raise RuntimeError("database gone")
        self.written.append((task_id, done, total, message))
        return True


def test_the_writer_writes_the_last_value_once_per_round_and_retries_after_a_failure():
    pool, store = _Pool(), _Store()
    writer = ProgressWriter(store, pool, "q")  # type: ignore[arg-type]
    busy, idle = TaskContext(1), TaskContext(2)
    for step in range(1000):
        busy.report_progress(step, 1000)
    writer.flush([busy, idle])
    writer.flush([busy, idle])  # nothing new: no connection taken
    assert store.written == [(1, 999, 1000, None)] and pool.taken == 1
    failing = ProgressWriter(_Store(fail=True), pool, "q")  # type: ignore[arg-type]
    busy.report_progress(1000, 1000, "done")
    failing.flush([busy])
    writer.flush([busy])  # kept for the next round
    assert store.written[-1] == (1, 1000, 1000, "done")


class _SlowStore(_Store):
    """Its first write waits until told to go on: a tick's write still in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.writing, self.go_on = threading.Event(), threading.Event()

    def report_progress(self, conn, task_id, done, total, message):
        if not self.written and not self.writing.is_set():
            self.writing.set()
            self.go_on.wait(5)
        return super().report_progress(conn, task_id, done, total, message)


def _a_tick_writing_step_2(store: _SlowStore) -> tuple[ProgressWriter, TaskContext, Any]:
    """A writer whose tick took step 2 of task 1 and is still writing it; the handler has
    reported step 3 meanwhile, its last, and returns."""
    writer = ProgressWriter(store, _Pool(), "q")  # type: ignore[arg-type]
    context = TaskContext(1)
    context.report_progress(2, 3)
    tick = threading.Thread(target=writer.flush, args=([context],))
    tick.start()
    assert store.writing.wait(5)
    context.report_progress(3, 3)
    return writer, context, tick


def test_a_completing_handlers_last_progress_is_written_after_a_ticks_older_value():
    store = _SlowStore()
    writer, context, tick = _a_tick_writing_step_2(store)
    completing = threading.Thread(target=writer.flush_one, args=(context,))
    completing.start()
    completing.join(0.2)
    store.go_on.set()
    tick.join(5)
    completing.join(5)
    assert store.written == [(1, 2, 3, None), (1, 3, 3, None)]
    writer.flush_one(TaskContext(2))  # never reported anything: nothing written
    assert len(store.written) == 2


def test_a_ticks_write_stuck_on_the_database_does_not_hold_the_tasks_end(monkeypatch, caplog):
    monkeypatch.setattr(progress_module, "TICK_WAIT_SECONDS", 0.05)
    store = _SlowStore()
    writer, context, tick = _a_tick_writing_step_2(store)
    writer.flush_one(context)  # gives up waiting: returns, the task ends
    assert "progress write still runs" in caplog.text
    store.go_on.set()
    tick.join(5)
    assert store.written == [(1, 2, 3, None)]


def test_cancel_payloads_are_told_apart_from_wake_ups():
    assert cancelled_ids([cancel_payload(12), "", "HALT", "cancel:x", "scheduled"]) == (
        [12],
        ["", "HALT", "cancel:x", "scheduled"],
    )


def test_queue_task_timeout_is_validated_and_is_the_default_timeout():
    settings = Settings.from_env({**DB, "QUEUE_TASK_TIMEOUT": "2.5"})
    assert TaskTimeouts(settings).timeout_for("any") == 2.5
    assert settings.queue_task_timeout_grace == 5.0
    assert TaskTimeouts(Settings.from_env(DB)).timeout_for("any") is None
    for value in ("0", "-1", "soon"):
        with pytest.raises(ConfigError) as info:
            Settings.from_env({**DB, "QUEUE_TASK_TIMEOUT": value})
        assert "QUEUE_TASK_TIMEOUT" in info.value.problems
    with pytest.raises(ConfigError) as info:
        Settings.from_env({**DB, "QUEUE_TASK_TIMEOUT_GRACE": "-1"})
    assert "QUEUE_TASK_TIMEOUT_GRACE" in info.value.problems
    assert timeout_message(2.5).startswith("timeout")
