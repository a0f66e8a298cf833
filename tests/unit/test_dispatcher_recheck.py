"""The dispatcher's recheck (runtime/dispatcher.py): after notifications, when the store's
claims may say "nothing" for a moment without a look-up (claim_recheck_seconds, the
PostgreSQL claim function's empty look-up position), it wakes every executor once more
that long after the last notification, so that a task such a claim missed never waits
for QUEUE_WAIT_NOTIFY_INTERVAL. A pure unit: a fake listener and store."""

from __future__ import annotations

import threading

from nsj_queue_lib.runtime.dispatcher import Dispatcher
from nsj_queue_lib.settings import Settings

WAIT_NOTIFY_INTERVAL = 30.0


class FakeStore:
    queue_table = "public.q"

    def __init__(self, recheck: float | None):
        self.claim_recheck_seconds = recheck

    def seconds_until_next_due(self, conn):
        return None

    def promote_due(self, conn, limit):
        return 0


class ScriptedListener:
    """Answers the dispatcher's waits from a script; records the timeouts it was given.
    Stops the dispatcher when the script ends."""

    def __init__(self, script: list[list[str]], stop: threading.Event):
        self.script = script
        self.timeouts: list[float] = []
        self.stop = stop

    def open(self):
        pass

    def close(self):
        pass

    def wait(self, timeout: float, interrupt_fd: int) -> list[str]:
        self.timeouts.append(timeout)
        if not self.script:
            self.stop.set()
            return []
        return self.script.pop(0)


def run(recheck: float | None, script: list[list[str]]) -> tuple[list[float], list[int]]:
    settings = Settings(
        db_host="h",
        db_name="d",
        db_user="u",
        queue_name="q",
        queue_table="q",
        queue_concurrency=4,
        queue_wait_notify_interval=WAIT_NOTIFY_INTERVAL,
    )
    stop = threading.Event()
    listener = ScriptedListener(script, stop)
    wakes: list[int] = []
    dispatcher = Dispatcher(
        settings,
        FakeStore(recheck),
        wakes.append,
        connect=lambda: None,
        listener=listener,
        is_outage=lambda exc: False,
        stop=stop,
        on_halt=lambda: None,
    )
    dispatcher.run()
    return listener.timeouts, wakes


def test_after_a_notification_the_executors_are_woken_again_when_the_recheck_is_due():
    # Start (wake all), a notification (wake one), then a wait that ends with nothing.
    timeouts, wakes = run(2.2, [["insert"], []])
    assert timeouts[0] == WAIT_NOTIFY_INTERVAL  # nothing notified yet: no recheck
    assert 2.0 < timeouts[1] <= 2.2  # after the notification: the recheck's time
    assert wakes == [4, 1, 4]  # ... which woke every executor
    assert timeouts[2] == WAIT_NOTIFY_INTERVAL  # and was done with


def test_each_notification_moves_the_recheck_after_it():
    timeouts, _ = run(2.2, [["insert"], ["insert"], []])
    assert 2.0 < timeouts[1] <= 2.2 and 2.0 < timeouts[2] <= 2.2


def test_a_store_whose_claims_always_look_up_needs_no_recheck():
    timeouts, wakes = run(None, [["insert"], []])
    assert timeouts[:2] == [WAIT_NOTIFY_INTERVAL, WAIT_NOTIFY_INTERVAL]
    assert wakes == [4, 1, 4]  # the last: the wait that ended with nothing, as ever
