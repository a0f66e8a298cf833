"""The webhook subscribers' circuit breakers' decisions that need no database
(fleet/subscriber_breakers.py); the breaker itself is tested on real databases and
HTTP in tests/contract/test_subscriber_breaker.py."""

from __future__ import annotations

import logging

import pytest

from nsj_queue_lib.db.subscriber_breaker_store import SubscriberBreaker
from nsj_queue_lib.exceptions import TaskHeld
from nsj_queue_lib.fleet.breakers import BreakerState
from nsj_queue_lib.fleet.subscriber_breakers import HELD_PREFIX, SubscriberBreakers


class Conn:
    def commit(self) -> None:
        pass

    def close(self) -> None:
        pass


class Store:
    def __init__(self, found: SubscriberBreaker | None, trial_free: bool = True) -> None:
        self.found = found
        self.trial_free = trial_free
        self.trials: list[int] = []

    def find(self, conn, subscriber_id):
        return self.found

    def take_trial(self, conn, subscriber_id, task_id):
        if self.trial_free:
            self.trials.append(task_id)
        return self.trial_free


def breakers(store: Store) -> SubscriberBreakers:
    gate = SubscriberBreakers("q", "public.q", "public.q_subscriber", Conn, 20.0, 5.0)
    gate._conn, gate._store = Conn(), store  # type: ignore[assignment]
    return gate


def found(failures, cool_down, is_open=False, trial=False, until_s=None) -> SubscriberBreaker:
    return SubscriberBreaker(failures, cool_down, BreakerState("s", 0, is_open, trial), until_s)


def test_a_subscriber_without_both_settings_has_no_breaker():
    assert breakers(Store(found(None, 60.0))).admit("s", 1) is None
    assert breakers(Store(found(5, None))).admit("s", 1) is None
    assert breakers(Store(None)).admit("s", 1) is None


@pytest.mark.parametrize("settings", [(0, 60.0), (5, 0.0), (5, -1.0), (5, 1e9)])
def test_refused_settings_are_no_breaker_and_logged_once(settings, caplog):
    gate = breakers(Store(found(*settings, is_open=True, until_s=30.0)))
    logger = logging.getLogger("nsj_queue_lib")
    logger.addHandler(caplog.handler)
    try:
        assert gate.admit("s", 1) is None
        assert gate.admit("s", 2) is None
    finally:
        logger.removeHandler(caplog.handler)
    # Distinct records: caplog may see one through propagation and through its handler.
    refused = {id(r) for r in caplog.records if "are refused" in r.getMessage()}
    assert len(refused) == 1


def test_an_open_breaker_holds_until_its_cool_down_ends():
    with pytest.raises(TaskHeld) as held:
        breakers(Store(found(5, 60.0, is_open=True, until_s=12.5))).admit("s", 1)
    assert held.value.delay_s == 12.5 and str(held.value).startswith(HELD_PREFIX)


def test_after_the_cool_down_one_delivery_is_the_trial_and_the_others_wait_a_cool_down():
    store = Store(found(5, 60.0, is_open=True, until_s=-0.5))
    assert breakers(store).admit("s", 7) is not None and store.trials == [7]
    taken = Store(found(5, 60.0, is_open=True, until_s=-0.5), trial_free=False)
    with pytest.raises(TaskHeld) as held:
        breakers(taken).admit("s", 8)
    assert held.value.delay_s == 60.0
    with pytest.raises(TaskHeld):
        breakers(Store(found(5, 60.0, is_open=True, trial=True, until_s=-3.0))).admit("s", 9)


def test_a_breaker_that_cannot_be_read_lets_deliveries_go_and_is_not_read_for_a_while():
    class Broken(Store):
        calls = 0

        def find(self, conn, subscriber_id):
            Broken.calls += 1
            raise RuntimeError("no such column")

    gate = breakers(Broken(None))
    assert gate.admit("s", 1) is None
    gate._conn, gate._store = Conn(), Broken(None)  # type: ignore[assignment]
    assert gate.admit("s", 2) is None
    assert Broken.calls == 1
