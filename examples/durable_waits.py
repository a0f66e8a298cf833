"""Durable waits: a task that sleeps, and one that waits for an approval.

``remind`` records when its first reminder went out, sleeps 5 seconds and answers: while it
sleeps its attempt has ended (the executor runs other tasks), and it resumes
from the start of the handler, its finished step returning at once.
``publish_post`` waits up to an hour for the event "approved", which
``QueueClient.send_event`` sends in the caller's transaction; it gets the
event's payload, or ``TimeoutError`` once the hour has passed.

Run a worker, then enqueue and approve (the usual environment: DB_HOST, DB_BASE,
DB_USER, QUEUE_NAME, QUEUE_TABLE; PostgreSQL or MySQL/MariaDB)::

    python examples/durable_waits.py            # the worker
    python examples/durable_waits.py enqueue    # another shell
"""

from __future__ import annotations

import json
import os
import sys
import time

from nsj_queue_lib import QueueClient, Settings, Task, WorkerBase, current_task


class WaitingWorker(WorkerBase):
    @Task("remind")
    def remind(self, payload: str, tarefa: dict, bd_conn) -> str:
        task = current_task()
        first = task.step("first", time.time)  # when the first reminder went out
        task.sleep(5)  # ends this attempt; the task resumes in 5 s
        return f"reminded twice, {time.time() - first:.1f} s apart"

    @Task("publish_post")
    def publish_post(self, payload: str, tarefa: dict, bd_conn) -> str:
        try:
            approval = current_task().wait_event("approved", timeout_s=3600)
        except TimeoutError:
            return "not approved within the hour"
        return f"published, approved by {approval['by']}"


def enqueue_and_approve() -> None:
    from nsj_queue_lib.db.driver import make_driver

    settings = Settings.from_env(os.environ)
    conn = make_driver(settings).connect(autocommit=True)
    try:
        client = QueueClient(conn, settings.queue_table)
        remind = client.insert_task("example", "reminders", "remind", "r-1", {})
        post = client.insert_task("example", "posts", "publish_post", "p-1", {"post": 1})
        time.sleep(1)  # the post's task is waiting by now (an earlier event would be kept)
        client.send_event(post, "approved", {"by": "editor"})  # autocommit: sent now
        for task_id in (post, remind):
            print(json.dumps(client.wait_for_task(task_id, timeout_s=30)["mensagem"]))
    finally:
        conn.close()


if __name__ == "__main__":
    enqueue_and_approve() if sys.argv[1:] == ["enqueue"] else WaitingWorker().run()
