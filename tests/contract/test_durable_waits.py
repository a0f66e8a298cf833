"""Durable waits (issue 41 item 5; CONTRACT.md section 8) on PostgreSQL and MariaDB.

``current_task().sleep(seconds)`` and ``.wait_event(name, timeout_s)`` end the attempt
without failing it (no retry counted, the executor freed) and the task resumes later
from its handler's start, its finished steps returning at once;
``QueueClient.send_event`` (in the caller's transaction) wakes a waiting task, an
event sent before the wait is kept, and a wait that times out raises
``TimeoutError`` in the resumed handler. In-process workers (``workers/steps_worker.py``).
"""

from __future__ import annotations

import json
import time

import pytest

from nsj_queue_lib.exceptions import NotFoundError
from tests.contract.test_async_handlers import BOTH
from tests.contract.test_durable_steps import (
    BATCHES,
    WITH_SERVER,
    checkpoints,
    committed,
    enqueue,
    steps_worker,
)
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)


def send(backend, task_id, name, payload=None):
    with backend.transaction() as conn:
        backend.client(conn).send_event(task_id, name, payload)


@WITH_SERVER
@BATCHES
def test_a_sleeping_task_frees_its_executor_and_resumes(backend, batch, slots):
    """One executor: a task sleeping 2 s lets a quick task run meanwhile; it resumes after
    the 2 s on the same attempt row (no retry), its step "before" not run again."""
    sleeper = enqueue(backend, "sleeper", "s", sleep=2)
    running = backend.run(steps_worker(backend, slots, queue_batch_size=batch, queue_concurrency=1))
    wait_for(
        lambda: backend.row(sleeper)["status"] == "pendente" and committed(backend),
        10,
        "the sleeper to start sleeping",
    )
    slept_at = time.monotonic()
    row = backend.row(sleeper)
    assert row["tentativa"] == 1 and row["mensagem"].startswith("sleeping until")
    assert committed(backend) == ["s-before"]
    quick = enqueue(backend, "quick", "q")
    wait_for(lambda: backend.row(quick)["status"] == "sucesso", 10, "the quick task to run")
    assert time.monotonic() - slept_at < 1.5  # while the sleeper sleeps
    assert backend.row(sleeper)["status"] == "pendente"
    wait_for(lambda: backend.row(sleeper)["status"] == "sucesso", 15, "the sleeper to resume")
    assert time.monotonic() - slept_at >= 1.5
    assert running.stop() == 0
    assert committed(backend) == ["q-quick", "s-after", "s-before"]
    assert len(backend.rows()) == 2  # the same attempt resumed: no new row
    done = backend.row(sleeper)
    assert done["tentativa"] == 1 and done["mensagem"] == "slept"
    assert set(checkpoints(backend, sleeper)) == {"before", "sleep:1"}


@WITH_SERVER
@BATCHES
def test_wait_event_is_woken_by_send_event_from_another_transaction(backend, batch, slots):
    """The waiting task is 'pendente' with a far deadline; send_event's commit makes it due
    at once and the resumed handler gets the payload."""
    task_id = enqueue(backend, "waiter", "w", timeout=60)
    running = backend.run(steps_worker(backend, slots, queue_batch_size=batch))
    wait_for(
        lambda: (backend.row(task_id)["mensagem"] or "").startswith("waiting for event 'go'"),
        10,
        "the task to wait",
    )
    assert backend.row(task_id)["status"] == "pendente"
    sent = time.monotonic()
    send(backend, task_id, "go", {"n": 1, "s": "x"})
    wait_for(lambda: backend.row(task_id)["status"] == "sucesso", 10, "the event to wake it")
    assert time.monotonic() - sent < 5  # woken, not polled at its deadline
    assert running.stop() == 0
    assert committed(backend) == ['w-got:{"n": 1, "s": "x"}']
    assert backend.row(task_id)["tentativa"] == 1


@BOTH
def test_an_event_sent_before_the_wait_is_kept(backend):
    """The event is sent while no worker runs: the task, when it first waits, takes it
    without suspending."""
    task_id = enqueue(backend, "waiter", "w", timeout=60)
    send(backend, task_id, "go", [1, 2])
    send(backend, task_id, "other")
    running = backend.run(steps_worker(backend))
    wait_for(lambda: backend.row(task_id)["status"] == "sucesso", 10, "the task to run")
    assert running.stop() == 0
    assert committed(backend) == ["w-got:[1, 2]"]


@BOTH
def test_wait_event_times_out_with_timeout_error_in_the_resumed_handler(backend):
    task_id = enqueue(backend, "waiter", "w", timeout=1)
    running = backend.run(steps_worker(backend))
    wait_for(lambda: backend.row(task_id)["status"] == "sucesso", 15, "the wait to time out")
    assert running.stop() == 0
    assert committed(backend) == ["w-timeout"]
    assert backend.row(task_id)["tentativa"] == 1
    [state] = checkpoints(backend, task_id).values()
    assert state["result"]["timed_out"] is True


@BOTH
def test_send_event_to_an_unknown_task_is_refused(backend):
    with pytest.raises(NotFoundError):
        send(backend, 10**12, "go")
    with pytest.raises(TypeError):
        send(backend, 1, "")
    assert json.dumps(backend.query(f"SELECT * FROM {backend.table}_events")) == "[]"
