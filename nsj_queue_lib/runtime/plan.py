"""The worker's modes, decided before anything is built: a pure function of its facts.

What the settings ask, what the database offers (``Capabilities``) and what
the worker found at start (its handlers, the socket server, nsj-queue-lib
1.2.2's workers on the table) decide how tasks are drained:

- slots: threads, or an event loop when some handlers are ``async def``;
- commits: in groups (QUEUE_BATCH_SIZE > 1; the default where the database
  says so) or one per task. Group commit needs synchronous handlers, a
  dialect with group statements and the liveness locks in the database (not
  CLIENT_SERVER_MODE nor QUEUE_COMPAT_1_2_2); where it cannot run, a
  QUEUE_BATCH_SIZE the user set is worth a warning (``ignored_batch_size``),
  the default falls back to one commit per task without a word.
"""

from __future__ import annotations

import dataclasses

from nsj_queue_lib.settings import Settings


@dataclasses.dataclass(frozen=True)
class DrainPlan:
    asynchronous: bool  # async slots on an event loop (else threads)
    group_commit: bool  # commit groups (else one commit per task)
    ignored_batch_size: int | None = None  # the QUEUE_BATCH_SIZE set but not honoured


def plan_drain(
    settings: Settings,
    *,
    group_commit_by_default: bool,
    group_statements: bool,
    asynchronous: bool,
    locks_in_database: bool,
) -> DrainPlan:
    """``group_statements``: the dialect has them (not SingleStore);
    ``locks_in_database``: neither CLIENT_SERVER_MODE nor QUEUE_COMPAT_1_2_2."""
    if settings.batch_size <= 1:
        return DrainPlan(asynchronous, False)
    if settings.queue_batch_size is None and not group_commit_by_default:
        # On by default on PostgreSQL only: MySQL/MariaDB groups deadlock with each other
        # under lock-key contention (InnoDB's gap locks) and a task one group gives back can
        # be claimed while its liveness lock is still held (docs/group-commit.md).
        return DrainPlan(asynchronous, False)
    if not group_statements or asynchronous or not locks_in_database:
        return DrainPlan(asynchronous, False, settings.queue_batch_size)
    return DrainPlan(asynchronous, True)
