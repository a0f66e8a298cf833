"""The dispatcher's recheck (runtime/dispatcher.py): after notifications, when the store's
claims may say "nothing" for a moment without a look-up (claim_recheck_seconds, the
PostgreSQL claim function's empty look-up position), it wakes every executor once more
that long after the last notification, so that a task such a claim missed never waits
for QUEUE_WAIT_NOTIFY_INTERVAL. A pure unit: a fake listener and store."""

from __future__ import annotations

from tests.helpers.scripted_dispatcher import WAIT_NOTIFY_INTERVAL, run_dispatcher


class FakeStore:
    queue_table = "public.q"

    def __init__(self, recheck: float | None):
        self.claim_recheck_seconds = recheck

    def seconds_until_next_due(self, conn):
        return None

    def promote_due(self, conn, limit):
        return 0


def run(recheck: float | None, script: list[list[str]]) -> tuple[list[float], list[int]]:
    return run_dispatcher(FakeStore(recheck), script, concurrency=4)


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
