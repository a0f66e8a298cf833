"""The SQL conditions of a pause, which every claim reads with the limits.

A pause is a row of the queue's limits table (``<queue>_limits``, flow/limits.py):
the processo's own row, or the row of ``QUEUE_ROW`` ('', never a processo: the
client refuses an empty one) for the whole queue, with ``paused`` true until
``paused_until`` (NULL: until resumed). Keeping it there costs the claims nothing
new: they already leave the processos of that table to the limited claim, and now
leave out a paused one too; the whole queue's row is one primary-key probe per
claim statement (an uncorrelated subquery, run once). An expired pause holds
nothing back: ``until`` resumes by itself, on the database's clock.

The ``now`` of these conditions is the clock ``paused_until`` is compared with: the
dialect's (``LimitsDialect.pause_clock``; on MySQL/MariaDB the UTC clock, as
``paused_until`` is a UTC DATETIME there: db/mysql/limits_table.sql says why).

Every argument is an identifier or expression of this library, never user input.
"""

from __future__ import annotations

from nsj_queue_lib.fleet.pause import QUEUE_ROW

_PAUSED = "({a}.paused AND ({a}.paused_until IS NULL OR {a}.paused_until > {now}))"
_LIMITED = (
    "({a}.max_concurrent IS NOT NULL OR {a}.rate_count IS NOT NULL"
    " OR {a}.interval_min_s IS NOT NULL OR {a}.time_windows IS NOT NULL"
    " OR {a}.max_concurrent_per_key IS NOT NULL)"
)


def paused(alias: str, now: str) -> str:
    """SQL: the limits row ``alias`` is a pause in force at ``now``."""
    return _PAUSED.format(a=alias, now=now)


def limited(alias: str) -> str:
    """SQL: the limits row ``alias`` declares limits (a pause-only row declares none)."""
    return _LIMITED.format(a=alias)


def held(alias: str, now: str) -> str:
    """SQL: the limits row ``alias`` holds its processo back from the ordinary claims: it
    declares limits, is paused, or its circuit breaker is open (fleet/breakers.py: the
    limited claim takes its trial)."""
    return f"({limited(alias)} OR {paused(alias, now)} OR {alias}.breaker_open)"


def queue_running(limits_table: str, now: str) -> str:
    """SQL: the whole queue is not paused at ``now``."""
    return (
        f"NOT EXISTS (SELECT 1 FROM {limits_table} AS qp"
        f" WHERE qp.processo = '{QUEUE_ROW}' AND {paused('qp', now)})"
    )


def startable(alias: str, limits_table: str, now: str) -> str:
    """SQL, for the limited claim: the limits row ``alias`` declares limits or has an open
    circuit breaker whose trial has not started (its cool-down's end is a due moment, as
    an interval's: db/<dialect>/limits.py), is not paused, and the whole queue is not
    paused."""
    a = alias
    return (
        f"({limited(a)} OR {a}.breaker_open) AND NOT {paused(a, now)}"
        f" AND NOT ({a}.breaker_open AND {a}.breaker_trial)"
        f" AND {queue_running(limits_table, now)}"
    )
