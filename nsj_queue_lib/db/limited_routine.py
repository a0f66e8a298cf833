"""The limited claim routine's DDL (``db/<dialect>/limited_claim.sql``) and its version.

PostgreSQL's is a function and MySQL/MariaDB's a procedure, both named
``claim_limited_<queue>_v<N>`` (``DdlNames.limited_routine_name``); db_gen
creates them with the queue and ``--upgrade`` adds them. A worker with
limits checks the routine's COMMENT at start (db/limits_store.py), as it
does the claim routine's. What differs per dialect is a ``LimitsDialect``
(``Driver.limits()``), defined next to the dialect's DDL.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from nsj_queue_lib.db import pause_conditions
from nsj_queue_lib.db.conditions import lock_key_free
from nsj_queue_lib.db.dialect import CLAIM_ROUTINE_RELEASE, DdlNames
from nsj_queue_lib.db.sql_files import read_sql, render, sql_code
from nsj_queue_lib.flow.limits import CAP_RECHECK_SECONDS, RATE_CATCH_UP
from nsj_queue_lib.flow.lock_keys import CLAIM_ATTEMPTS


@dataclasses.dataclass(frozen=True)
class LimitsDialect:
    """What per-processo limits need of a dialect: its limited claim routine's parts, and
    how a worker calls it and checks its version (db/limits_store.py)."""

    name: str  # the package of its limited_claim.sql, previous_claim.sql and limits.sql
    now: str  # the clock
    open_windows: str  # the routine's parameter holding the open windows' hashes
    handled_processos: str  # ... and the one holding the worker's processos (NULL: all)
    # The limited processos' states the routine decides on: SQL over {capped}, {ready},
    # {limits_table}, {open} and {handled} (``limited_states``).
    states: str
    # The claim routine version of the previous release (1), as its workers check it at
    # start: its routine, made a call of this release's by --upgrade, keeps it.
    previous_claim_version: str
    # ``routine_version``'s parameters (limits.sql) for the routine's name.
    routine_version_params: Callable[[str], dict[str, Any]]
    # One call of the routine: (limits store, conn, db.limits_store.ClaimRequest) ->
    # db.limits_store.LimitedClaim.
    claim: Callable[..., Any]
    # The clock paused_until is compared with (db/pause_conditions.py): ``now`` by default.
    pause_clock: str | None = None
    # The routine's lock_key condition (table, row, now): db/conditions.py's by default.
    lock_key_free: Callable[[str, str, str], str] = lock_key_free
    # The dialect's own placeholders of limited_claim.sql, and of limits.sql.
    claim_values: Mapping[str, str] = dataclasses.field(default_factory=dict)
    query_values: Mapping[str, str] = dataclasses.field(default_factory=dict)


# Per limited processo with a ready task (one its lock_key lets start) whose
# time windows are open (by the worker's clock: ``{open}`` is the list of
# window_hash() of the open ones): ``due_in``, the seconds until its
# interval_s and rate_limit allow the next start (NULL: now, or never started;
# negative: late), and ``capped``: max_concurrent reached, or every ready task
# has a fair_key at its max_concurrent_per_key (then, as for max_concurrent,
# the worker looks again after cap_recheck or a task's end, rather than at once).
_CAPPED = (
    "((l.max_concurrent IS NOT NULL AND l.max_concurrent <= (SELECT count(*) FROM {table} AS r"
    " WHERE {hot_r}r.processo = l.processo AND r.status = 'processando'))"
    " OR (l.max_concurrent_per_key IS NOT NULL AND NOT {ready_with_headroom}))"
)
_READY = (
    "EXISTS (SELECT 1 FROM {table} AS t WHERE {hot_t}t.processo = l.processo"
    " AND t.status = 'pendente'"
    " AND t.data_hora <= {now} AND {lock_key_free}"
    " AND NOT (t.dead AND l.breaker_open){also})"
)
# The (processo, fair_key) pairs at their processo's max_concurrent_per_key. Not
# correlated with the candidate: read once per statement (PostgreSQL hashes it,
# MariaDB materializes it) from the running tasks, which are few, through an index
# of them (PostgreSQL's partial index of 'processando' rows, probed in each
# partition of the partitioned layout, empty outside the hot one; MySQL's indexes
# led by status), however long the backlog of ready tasks the candidates come from.
# The limited claim holds the processo's limits row, and reads this after taking it:
# no other claim of the processo can start a task in between.
_KEYS_AT_CAP = (
    "SELECT c.processo, c.fair_key FROM {table} AS c"
    " JOIN {limits_table} AS k ON k.processo = c.processo"
    " WHERE {hot_c}k.max_concurrent_per_key IS NOT NULL AND c.status = 'processando'"
    " AND c.fair_key IS NOT NULL"
    " GROUP BY c.processo, c.fair_key, k.max_concurrent_per_key"
    " HAVING count(*) >= k.max_concurrent_per_key"
)
# The candidate ``t``'s fair key has room under its processo's cap (tasks without a
# fair key are not capped by it).
_KEY_HEADROOM = "(t.fair_key IS NULL OR (t.processo, t.fair_key) NOT IN ({keys_at_cap}))"


def hot_pin(hot_day: int | None, alias: str) -> str:
    """The condition that pins a read of unfinished rows (alias ``alias``) to the hot
    partition of a partitioned table, with its AND (db/postgres/layout.py); '' elsewhere."""
    return "" if hot_day is None else f"{alias}.finished_day = {int(hot_day)} AND "


def key_headroom(table: str, limits_table: str, hot_day: int | None = None) -> str:
    """SQL: the limited claim's candidate ``t`` of ``table`` is not held back by
    max_concurrent_per_key (identifiers of this library, never user input)."""
    return _KEY_HEADROOM.format(
        keys_at_cap=_KEYS_AT_CAP.format(
            table=table, limits_table=limits_table, hot_c=hot_pin(hot_day, "c")
        )
    )


# An open circuit breaker's trial is a task of the processo's handler: its dead letters
# (execute_dead's) wait until the breaker closes (fleet/breakers.py).
_TRIAL_CANDIDATE = (
    "NOT (t.dead AND EXISTS (SELECT 1 FROM {limits_table} AS b"
    " WHERE b.processo = t.processo AND b.breaker_open))"
)


def limited_states(
    dialect: LimitsDialect, table: str, limits_table: str, free: str, hot_day: int | None = None
) -> str:
    """SQL: the limited processos' states the limited claim routine decides on
    (``LimitsDialect.states``), of the processos the worker handles (its parameter; NULL:
    every one); ``free``: the routine's lock_key condition; ``hot_day``: the hot
    partition's key, on a partitioned table (its reads of unfinished rows are pinned
    there: unpinned, every call planned and probed each day's partition, 3 s a call at
    60 days of history). Every argument is an identifier or expression of this library,
    never user input."""
    return dialect.states.format(
        limits_table=limits_table,
        open=dialect.open_windows,
        handled=dialect.handled_processos,
        # Neither a pause-only row nor a paused processo or queue (db/pause_conditions.py).
        startable=pause_conditions.startable("l", limits_table, dialect.pause_clock or dialect.now),
        capped=_CAPPED.format(
            table=table,
            hot_r=hot_pin(hot_day, "r"),
            ready_with_headroom=_READY.format(
                table=table,
                hot_t=hot_pin(hot_day, "t"),
                now=dialect.now,
                lock_key_free=free,
                also=" AND " + key_headroom(table, limits_table, hot_day),
            ),
        ),
        ready=_READY.format(
            table=table, hot_t=hot_pin(hot_day, "t"), now=dialect.now, lock_key_free=free, also=""
        ),
    )


def _values(
    dialect: LimitsDialect, table: str, limits_table: str, hot_day: int | None = None
) -> dict[str, str]:
    """``hot_day``: the hot partition's key of a partitioned table, to which the routine's
    reads of unfinished rows are pinned (db/postgres/layout.py; the version is computed
    without it)."""
    hot_t = hot_pin(hot_day, "t")
    free = (
        dialect.lock_key_free(table, "t", dialect.now)
        if hot_day is None
        else lock_key_free(table, "t", dialect.now, hot_day=hot_day)
    )
    return {
        "hot_t": hot_t,
        **dialect.claim_values,
        "table": table,
        "limits_table": limits_table,
        "limited_states": limited_states(dialect, table, limits_table, free, hot_day),
        "lock_key_free": free,
        "trial_candidate": _TRIAL_CANDIDATE.format(limits_table=limits_table),
        "key_headroom": key_headroom(table, limits_table, hot_day),
        "catch_up": repr(RATE_CATCH_UP),
        "cap_recheck": repr(CAP_RECHECK_SECONDS),
        "attempts": str(CLAIM_ATTEMPTS),
    }


def limited_claim_version(dialect: LimitsDialect) -> str:
    """The routine's COMMENT: changes whenever its code does (comments aside)."""
    values = dict(_values(dialect, "t", "l"), limited_claim="r", limited_claim_version="")
    source = sql_code(render(read_sql(dialect.name, "limited_claim.sql"), values))
    return f"nsj_queue_lib limited claim {hashlib.sha256(source.encode()).hexdigest()[:16]}"


def limited_claim_ddl(dialect: LimitsDialect, template_values: dict[str, str]) -> str:
    """The routine's CREATE for the queue of ``template_values`` (DdlNames.template_values)."""
    values = _values(
        dialect,
        template_values["table"],
        template_values["limits_table"],
        int(template_values["hot_day"]) if template_values.get("hot_day") else None,
    )
    values["limited_claim"] = template_values["limited_claim"]
    values["limited_claim_version"] = limited_claim_version(dialect)
    return render(read_sql(dialect.name, "limited_claim.sql"), values).strip()


def previous_claim_ddl(dialect: LimitsDialect, names: DdlNames) -> str:
    """``db_gen --upgrade``: the previous release's claim routine made a call of this
    release's (``previous_claim.sql``), so that its workers leave limited processos alone.
    Written for release 1 next to release 2; a later release rethinks it."""
    if CLAIM_ROUTINE_RELEASE != 2:
        return ""
    values = names.template_values()
    values["previous_claim_function"] = names.old_routine_names()[1]
    values["previous_claim_version"] = dialect.previous_claim_version
    return render(read_sql(dialect.name, "previous_claim.sql"), values).strip()
