"""Durable steps and waits in ``InMemoryQueue`` (testing/steps.py): the same handler code
as with a database, its checkpoints and events in memory, its sleeps on the queue's
clock."""

from __future__ import annotations

import datetime
import json

import pytest

from nsj_queue_lib import QueueClient, Task, WorkerBase, current_task
from nsj_queue_lib.testing import InMemoryQueue

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


class Durable(WorkerBase):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def _call(self, what: str, bd_conn) -> str:
        self.calls.append(what)
        # A follow-up task enqueued on bd_conn: kept with the step.
        QueueClient(bd_conn, "public.fila").insert_task("t", "t", "follow_up", what, {})
        return what

    @Task("two_steps", max_retry=3, retry_base_s=1)
    def two_steps(self, payload, tarefa, bd_conn):
        task = current_task()
        a = task.step("a", self._call, "a", bd_conn)
        if tarefa["tentativa"] == 1:
            raise RuntimeError("after a")
        return json.dumps([a, task.step("b", self._call, "b", bd_conn)])

    @Task("sleeper")
    def sleeper(self, payload, tarefa, bd_conn):
        current_task().step("before", self._call, "before", bd_conn)
        current_task().sleep(3600)
        return "woke"

    @Task("waiter")
    def waiter(self, payload, tarefa, bd_conn):
        try:
            return json.dumps(current_task().wait_event("go", timeout_s=60))
        except TimeoutError:
            return "timed out"

    def execute(self, payload, tarefa, bd_conn):
        return "ok"


@pytest.fixture
def queue():
    return InMemoryQueue(now=START)


def insert(queue, processo):
    return QueueClient(queue.connection(), "public.fila").insert_task("t", "t", processo, "k", {})


def test_a_retry_skips_the_finished_step_and_its_follow_up_is_kept_once(queue):
    worker = Durable()
    task_id = insert(queue, "two_steps")
    queue.run(worker)
    assert worker.calls == ["a", "b"]
    [retry] = queue.tasks(id_anterior=task_id)
    assert retry["status"] == "sucesso" and json.loads(retry["mensagem"]) == ["a", "b"]
    assert sorted(t["chave_externa"] for t in queue.tasks(processo="follow_up")) == ["a", "b"]


def test_a_sleep_ends_the_attempt_and_resumes_on_the_queues_clock(queue):
    worker = Durable()
    task_id = insert(queue, "sleeper")
    queue.run(worker, advance_time=False)
    row = queue.task(task_id)
    assert row["status"] == "pendente" and row["data_hora"] == START + datetime.timedelta(hours=1)
    queue.run(worker)
    assert queue.task(task_id)["status"] == "sucesso" and queue.task(task_id)["tentativa"] == 1
    assert worker.calls == ["before"]
    assert len(queue.tasks(processo="follow_up")) == 1


def test_wait_event_gets_a_sent_event_or_times_out(queue):
    worker = Durable()
    waiting, timing_out = insert(queue, "waiter"), insert(queue, "waiter")
    queue.run(worker, advance_time=False)
    assert queue.task(waiting)["status"] == "pendente"
    QueueClient(queue.connection(), "public.fila").send_event(waiting, "go", {"ok": 1})
    assert queue.task(waiting)["data_hora"] == START  # due now
    queue.run(worker, advance_time=False)
    assert queue.task(waiting)["mensagem"] == '{"ok": 1}'
    assert queue.task(timing_out)["status"] == "pendente"
    queue.run(worker)  # the clock moves to the deadline
    assert queue.task(timing_out)["mensagem"] == "timed out"
