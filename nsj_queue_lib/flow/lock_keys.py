"""lock_key: tasks with equal keys never run at the same time, and start in claim order.

The claim decides, with one condition on each candidate row: a keyed row is
claimable only when no other row of its key is running ('processando') and
none comes before it in claim order among the ready rows. A row whose key is
busy is simply not a candidate (it holds no executor and is never claimed and
given back), and becomes one the moment the running row of its key leaves
'processando': at its commit, or when the retry service rescues the attempt
of a worker that died. The condition reads two indexes of the keyed rows
(``idx_<queue>_lock_key``, ``idx_<queue>_lock_key_running`` on PostgreSQL),
one entry each per keyed candidate, however many tasks a key has.

Two claims whose snapshots both saw a key free (a new head of the key committed
between them) are kept apart by the database: a unique index of the running
keys (partial on PostgreSQL, over the generated column ``lock_key_running`` on
MySQL/MariaDB). The later claim's row is refused; the claim skips it and
claims again (``claim_skipping_busy_keys``, and the same loop inside the claim
routines).

The condition's SQL is ``db/conditions.py``'s ``lock_key_free``; this module
holds what the claims do when they lose a key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# How often a claim that lost a key to a concurrent claim tries again. The
# database's unique index of running keys refused the row after waiting for
# the other claim's commit, so the next try's snapshot sees the key busy and
# skips it: a second refusal needs yet another head move in between.
CLAIM_ATTEMPTS = 3


def claim_skipping_busy_keys(
    attempt: Callable[[], T | None],
    lost_key: Callable[[BaseException], bool],
    undo: Callable[[], None],
) -> T | None:
    """``attempt`` (one claim); when the database refuses its row because a concurrent
    claim took the row's lock_key first (``lost_key``), ``undo`` it and claim again.

    None when every attempt lost its row: the caller sees "nothing claimed", never an
    error. The socket-server claims use this; the claim routines do the same inside.
    """
    for _ in range(CLAIM_ATTEMPTS):
        try:
            return attempt()
        except Exception as exc:
            if not lost_key(exc):
                raise
            undo()
    return None
