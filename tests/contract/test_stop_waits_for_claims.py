"""A stopping worker waits for the tasks it claimed, also those whose handler has not
started yet (between the claim's commit and the handler's start, a busy machine can
leave a thread for a long while): the grace period covers them as running tasks."""

from __future__ import annotations

import threading
import time

import pytest

from nsj_queue_lib.runtime.attempt import Attempts
from tests.contract.test_group_commit import BOTH

pytestmark = pytest.mark.timeout(120)


@BOTH
@pytest.mark.parametrize("batch", [1, 10], ids=["one commit per task", "group"])
def test_stop_waits_for_a_claimed_task_whose_handler_has_not_started(backend, batch, monkeypatch):
    started = Attempts.start
    claimed = threading.Event()

    def starved(self, conn, claim):
        claimed.set()
        time.sleep(1.5)  # a starved thread, between the claim and the start
        return started(self, conn, claim)

    monkeypatch.setattr(Attempts, "start", starved)
    worker = backend.run(
        backend.function_worker(lambda *args: "ok", queue_batch_size=batch, queue_grace_period=20)
    )
    [task] = backend.enqueue([dict(payload="{}")])
    assert claimed.wait(15)
    assert backend.row(task)["status"] == "processando"
    assert worker.stop() == 0
    # The stop returned after the task, not while it was still to start.
    assert backend.row(task)["status"] == "sucesso"
