"""The circuit breakers' read (``BreakerStore.breakers``: nsjq status, the console and each
worker's breaker recorder) on every layout: a trial's bound comes from its task's own
``timeout_s``, read by the trial tasks' ids after the breakers' rows, never for a breaker
without a trial."""

from __future__ import annotations

import re

from nsj_queue_lib.db.pause_store import BreakerStore
from tests.integration.store.backends import LOCKING, on

pytestmark = on(*LOCKING)

UNKNOWN_TASK = 999_999_999


def seed_breaker(backend, processo: str, trial_task: int | None, failures: int = 0) -> None:
    backend.execute(
        f"INSERT INTO {backend.table}_limits (processo, breaker_open, breaker_trial,"
        " breaker_trial_task, breaker_failures) VALUES (%s, %s, %s, %s, %s)",
        (processo, trial_task is not None, trial_task is not None, trial_task, failures),
    )


def test_a_trials_bound_is_its_tasks_own_timeout(backend):
    timed, untimed = backend.enqueue(dict(processo="slow", timeout_s=42), dict(processo="plain"))
    backend.claim(backend.worker())  # the trial runs: its row is the unfinished one
    seed_breaker(backend, "slow", timed)
    seed_breaker(backend, "plain", untimed)
    seed_breaker(backend, "gone", UNKNOWN_TASK)
    seed_breaker(backend, "failing", None, failures=2)
    conn = backend.client_conn()
    states = {s.processo: s for s in BreakerStore(conn, backend.table).breakers(conn)}
    conn.rollback()
    assert {p: (s.trial_task, s.trial_timeout_s) for p, s in states.items()} == {
        "failing": (None, None),
        "gone": (UNKNOWN_TASK, None),
        "plain": (untimed, None),
        "slow": (timed, 42.0),
    }
    assert states["failing"].failures == 2 and not states["failing"].open
    assert states["slow"].open and states["slow"].trial


def test_breakers_without_a_trial_do_not_read_the_queue_table(backend):
    """On the partitioned layout a look-up by id is planned over every day partition, so the
    read of the breakers names the limits table alone, and a breaker without a trial asks
    nothing more."""
    seed_breaker(backend, "failing", None, failures=1)
    conn = backend.client_conn()
    store = BreakerStore(conn, backend.table)
    assert not re.search(rf"{re.escape(backend.table)}(?!_limits)\b", store.sql["breakers"])
    store.sql["trial_timeouts"] = "SELECT no_such_column FROM no_such_table"
    [state] = store.breakers(conn)
    conn.rollback()
    assert (state.processo, state.failures, state.trial_timeout_s) == ("failing", 1, None)
