"""The dispatcher's plan (runtime/dispatcher.py): the next scheduled row's time is asked of
the database at start, after a 'scheduled' notification, when it comes, and, where the
database notifies, after other notifications at most every REPLAN_SECONDS; polling
wake-ups re-plan every time. A pure unit: a scripted listener and a counting store."""

from __future__ import annotations

from nsj_queue_lib.notify import SCHEDULED_PAYLOAD
from nsj_queue_lib.runtime import dispatcher as dispatching
from tests.helpers.scripted_dispatcher import run_dispatcher


class CountingStore:
    queue_table = "public.q"
    claim_recheck_seconds = None

    def __init__(self, due_in: float | None = None):
        self.plans = 0
        self.due_in = due_in

    def seconds_until_next_due(self, conn):
        self.plans += 1
        return self.due_in

    def promote_due(self, conn, limit):
        return 0


def run(script, notifies: bool, store: CountingStore) -> tuple[list[float], list[int]]:
    return run_dispatcher(store, script, concurrency=2, notifies=notifies)


def test_tasks_ready_now_do_not_replan_where_the_database_notifies():
    store = CountingStore(due_in=10.0)
    timeouts, wakes = run([[""], [""], [""], [""]], notifies=True, store=store)
    assert store.plans == 1  # at start only
    assert wakes == [2, 1, 1, 1, 1]  # every notification still woke an executor
    # The waits count down to the same planned time.
    assert all(9.9 < t <= 10.002 for t in timeouts)
    assert timeouts == sorted(timeouts, reverse=True)


def test_a_wait_that_timed_out_replans():
    store = CountingStore(due_in=10.0)
    run([[""], [], [""]], notifies=True, store=store)
    assert store.plans == 2  # at start, and after the wait that ended with nothing


def test_a_scheduled_notification_replans_at_once():
    store = CountingStore(due_in=10.0)
    run([[""], [SCHEDULED_PAYLOAD], [""]], notifies=True, store=store)
    assert store.plans == 2  # at start, and after the 'scheduled' one


def test_an_old_plan_is_asked_again(monkeypatch):
    monkeypatch.setattr(dispatching, "REPLAN_SECONDS", 0.0)
    store = CountingStore(due_in=10.0)
    run([[""], [""]], notifies=True, store=store)
    assert store.plans == 3  # each wake-up re-planned: the plan was already too old


def test_polling_wake_ups_replan_every_time():
    store = CountingStore(due_in=None)
    run([[""], [""], [""]], notifies=False, store=store)
    assert store.plans == 4  # at start and after each of the three wake-ups
