"""What a worker logs, in-process on real PostgreSQL (read with caplog: the library's
records propagate like any library's).

- A failed attempt: one WARNING line with the handler's own traceback (also with
  LOG_DEBUG, where it used to print ``NoneType: None``) and when its next attempt
  runs; the next attempt says which attempt it is and after what error.
- While busy, one INFO line per interval: done / failed / rescued / running;
  nothing while idle.
- A QUEUE_NAME that is not the channel the table's trigger notifies: a warning
  at start (tasks would wait for the periodic look).
"""

from __future__ import annotations

import logging
import re
import time

import pytest

from nsj_queue_lib.runtime import worker_runtime
from tests.helpers.processes import enqueue, statuses, wait_for


def messages(caplog, text: str, level: int | None = None) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if text in r.getMessage() and (level is None or r.levelno == level)
    ]


def deep_inside(payload: str) -> None:
    raise ValueError(f"boom {payload}")


@pytest.mark.parametrize("log_debug", [False, True])
def test_a_failed_attempt_logs_its_traceback_once_and_its_next_attempt(
    log_debug, start_worker, pg_queue, pg_dsn, pg_autocommit, caplog
):
    caplog.set_level(logging.INFO, logger="nsj_queue_lib")

    def execute(payload, tarefa, bd_conn):
        if tarefa["tentativa"] == 1:
            deep_inside(payload)
        return "second time lucky"

    start_worker(execute, queue_max_retry=3, log_debug=log_debug)
    [first] = enqueue(pg_dsn, pg_queue.table, [dict(payload="x")])
    wait_for(
        lambda: statuses(pg_autocommit, pg_queue.table) == {"falha": 1, "sucesso": 1},
        15,
        "the retry to succeed",
    )
    [failure] = messages(caplog, "failed", logging.WARNING)
    text = failure.getMessage()
    assert text.startswith(
        f"queue={pg_queue.name} task={first}: attempt 1 of 3 failed: ValueError: boom x; "
        "next attempt at "
    ), text
    assert re.search(r"next attempt at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(in [0-9.]+ s\)$", text)
    traceback = logging.Formatter().formatException(failure.exc_info)
    assert "NoneType: None" not in traceback
    assert "in deep_inside" in traceback and "ValueError: boom x" in traceback, traceback
    second = pg_autocommit.execute(
        f"SELECT id FROM {pg_queue.table} WHERE status = 'sucesso'"
    ).fetchone()[0]
    [retry] = messages(caplog, "retrying task", logging.INFO)
    assert retry.getMessage() == (
        f"queue={pg_queue.name} task={second}: attempt 2 of 3, retrying task {first} "
        "after 'ValueError: boom x'"
    )


ACTIVITY = re.compile(r"done=(\d+) failed=(\d+) rescued=(\d+) running=(\d+)$")


def test_one_info_line_per_interval_while_busy_none_while_idle(
    monkeypatch, start_worker, pg_queue, pg_dsn, pg_autocommit, caplog
):
    monkeypatch.setattr(worker_runtime, "ACTIVITY_INTERVAL_SECONDS", 0.5)
    caplog.set_level(logging.INFO, logger="nsj_queue_lib")

    def execute(payload, tarefa, bd_conn):
        if payload == "fail":
            raise RuntimeError("no")
        return None

    start_worker(execute, queue_max_retry=1)  # the failure's dead letter runs execute_dead
    enqueue(pg_dsn, pg_queue.table, [dict(payload="a"), dict(payload="b"), dict(payload="fail")])

    def totals() -> list[int]:
        found = [ACTIVITY.search(r.getMessage()) for r in messages(caplog, "done=")]
        return [sum(int(m.group(i)) for m in found if m) for i in (1, 2, 3)]

    wait_for(lambda: totals() == [3, 1, 0], 15, "the activity lines to count the tasks")
    lines = messages(caplog, "done=", logging.INFO)
    assert all(r.getMessage().startswith(f"queue={pg_queue.name}: last ") for r in lines)
    time.sleep(1.6)  # three idle intervals
    assert len(messages(caplog, "done=")) == len(lines)


@pytest.fixture
def trigger_warnings(caplog):
    caplog.set_level(logging.WARNING, logger="nsj_queue_lib")
    return lambda: [r.getMessage() for r in messages(caplog, "new tasks wait for the next poll")]


def test_the_right_queue_name_gives_no_warning(start_worker, trigger_warnings):
    worker = start_worker(lambda *a: None)
    wait_for(lambda: worker.worker._runtime is not None, 10, "the runtime")
    assert trigger_warnings() == []


def test_a_queue_name_the_trigger_does_not_notify_is_warned_at_start(
    start_worker, pg_queue, trigger_warnings
):
    start_worker(lambda *a: None, wait_listening=False, queue_name="not_the_channel")
    wait_for(trigger_warnings, 10, "the warning")
    [warning] = trigger_warnings()
    assert warning == (
        f"queue=not_the_channel: QUEUE_NAME=not_the_channel: table {pg_queue.table} notifies "
        f"channel '{pg_queue.name}', not 'not_the_channel': new tasks wait for the next poll "
        "(QUEUE_WAIT_NOTIFY_INTERVAL) instead of waking this worker "
        "(is QUEUE_NAME the name given to db_gen?)"
    )


def test_a_table_without_its_trigger_is_warned_at_start(
    start_worker, pg_queue, pg_admin, trigger_warnings
):
    [name] = pg_admin.execute(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass(%s) AND NOT tgisinternal "
        "AND tgname LIKE 'trigger_insert_%%'",
        (pg_queue.table,),
    ).fetchone()
    pg_admin.execute(f'DROP TRIGGER "{name}" ON {pg_queue.table}')
    start_worker(lambda *a: None)
    wait_for(trigger_warnings, 10, "the warning")
    [warning] = trigger_warnings()
    assert f"table {pg_queue.table} has no trigger that notifies, not '{pg_queue.name}'" in warning
