"""The claim function's window (claim_function.sql, issue 19): a claim first walks only the
first ready rows (eight per task asked for, at least 128); it walks every ready row when
the window gives nothing, and a window of two prioridades is not walked apart.

The backlogs here are larger than the window, which the worker-level lock_key tests never
reach.
"""

from __future__ import annotations

import pytest

from tests.integration.store.test_store_claim_position import FAR_FUTURE_US

pytestmark = [pytest.mark.backends("postgres"), pytest.mark.timeout(60)]

WINDOW = 128  # greatest(claim_limit * 8, 128) for claim_limit up to 16


def _claim(backend, worker, limit: int) -> list[int]:
    rows = backend.store.claim_call(worker, None, None, limit, b"COMMIT", begin=True)
    return [row["id"] for row in rows]


def test_a_window_of_busy_keys_only_then_every_ready_row_is_walked(backend):
    hot = backend.enqueue(*[dict(lock_key="hot") for _ in range(WINDOW + 40)])
    other = backend.enqueue(dict(lock_key="other"))
    free = backend.enqueue(dict())
    worker = backend.worker()
    assert _claim(backend, worker, 1) == [hot[0]]  # the key "hot" is running now

    # A look-up: the window holds the hot key's waiting tasks only, nothing there; beyond
    # it, two.
    _forget_position(worker)
    assert _claim(backend, worker, 10) == [*other, *free]
    assert _claim(backend, worker, 10) == []


def test_from_the_position_a_claim_takes_the_next_window_when_its_own_has_nothing(backend):
    """Where busy keys filled the look-up's window, a claim from the position walks that
    window; when nothing there is claimable, the window after it, which is the position's
    window from then on (a busy key's backlog is not probed row by row to its end at every
    claim)."""
    hot = backend.enqueue(*[dict(lock_key="hot") for _ in range(WINDOW + 10)])
    free = backend.enqueue(*[dict() for _ in range(WINDOW + 10)])
    worker = backend.worker()
    assert _claim(backend, worker, 10) == [hot[0]]  # a look-up; the key "hot" is running
    _keep_position(worker)
    assert int(_position(worker)[8]) == hot[WINDOW - 1]  # the look-up's window's last row
    assert _claim(backend, worker, 10) == free[:10]  # from the next window, in claim order
    assert int(_position(worker)[8]) == free[WINDOW - 11]  # the next window's last row
    assert _claim(backend, worker, 10) == free[10:20]  # from that window


def test_from_the_position_nothing_in_two_windows_walks_every_row(backend):
    hot = backend.enqueue(*[dict(lock_key="hot") for _ in range(2 * WINDOW + 40)])
    other = backend.enqueue(dict(lock_key="other"))
    free = backend.enqueue(dict())
    worker = backend.worker()
    assert _claim(backend, worker, 10) == [hot[0]]  # a look-up; the key "hot" is running
    _keep_position(worker)
    assert _claim(backend, worker, 10) == [*other, *free]  # beyond both windows
    assert int(_position(worker)[8]) == hot[WINDOW - 1]  # nothing in the next: kept
    assert _claim(backend, worker, 10) == []


@pytest.mark.parametrize("keyed", [False, True])
def test_a_window_that_gives_what_was_asked_is_not_kept(backend, keyed):
    """A plain drain's (or one of many keys') claims walk on from the position, one
    statement each, instead of going window by window."""
    tasks = backend.enqueue(*[dict(lock_key=f"k{i}" if keyed else None) for i in range(300)])
    worker = backend.worker()
    assert _claim(backend, worker, 10) == tasks[:10]
    assert len(_position(worker)) == 7  # no window's last row
    _keep_position(worker)
    for start in range(10, 300, 10):  # past where the window ended
        assert _claim(backend, worker, 10) == tasks[start : start + 10]


def _forget_position(worker) -> None:
    worker.execute("SELECT set_config('nsjq.claim_position', '', false)")


def _position(worker) -> list[str]:
    return worker.execute("SELECT current_setting('nsjq.claim_position')").fetchone()[0].split(",")


def _keep_position(worker) -> None:
    """The session's position made to outlive the test (its lives end in 20 ms here)."""
    fields = _position(worker)
    fields[1] = fields[6] = str(FAR_FUTURE_US)  # fresh, then usable: until 2096
    worker.execute("SELECT set_config('nsjq.claim_position', %s, false)", (",".join(fields),))


def test_the_window_claims_what_the_whole_walk_would_claim_first(backend):
    keyed = backend.enqueue(*[dict(lock_key=f"k{i % 4}") for i in range(WINDOW + 40)])
    worker = backend.worker()
    # The first task of each key, in claim order; the second tasks wait for their keys.
    assert _claim(backend, worker, 10) == keyed[:4]
    assert _claim(backend, worker, 10) == []


def test_a_claim_finding_some_in_the_window_leaves_the_rows_beyond_it(backend):
    hot = backend.enqueue(*[dict(lock_key="hot") for _ in range(WINDOW + 40)])
    beyond = backend.enqueue(*[dict() for _ in range(3)])
    worker = backend.worker()
    # The window holds one claimable row (the key's head): the claim takes it alone.
    assert _claim(backend, worker, 10) == [hot[0]]
    # Then the window gives nothing: the whole walk finds the rows beyond it.
    assert _claim(backend, worker, 10) == beyond


def test_a_window_of_two_prioridades_is_walked_as_one_claim_order(backend):
    low = backend.enqueue(*[dict(lock_key="low") for _ in range(WINDOW + 40)])
    high = backend.enqueue(dict(prioridade=90), dict(lock_key="high", prioridade=90))
    worker = backend.worker()
    assert _claim(backend, worker, 10) == [*high, low[0]]


def test_after_the_first_rows_prioridade_the_lower_ones_are_claimed_in_prioridade_order(backend):
    """A look-up claims its first row's prioridade from that row on, then, for the rest
    of the claim, the lower prioridades: highest first, not oldest first."""
    [low] = backend.enqueue(dict(prioridade=10))
    [mid] = backend.enqueue(dict(prioridade=50))
    [high] = backend.enqueue(dict(prioridade=90))
    worker = backend.worker()
    assert _claim(backend, worker, 2) == [high, mid]
    assert _claim(backend, worker, 2) == [low]
