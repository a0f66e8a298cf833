"""The SQL conditions the claims of every dialect share (all their arguments are
identifiers, expressions or templates of this library, never user input).

- ``lock_key_free``: tasks with equal keys never run at the same time, and start in
  claim order (``flow/lock_keys.py`` says how the claims keep it).
- ``limits_free``: tasks of limited processos are left to the limited claim
  (``flow/limits.py``).
- ``Deliverable``: a claim takes only the tasks its worker handles
  (``flow/deliveries.py``), spelled by each dialect (``db/<dialect>/deliveries.py``).
"""

from __future__ import annotations

import dataclasses

from nsj_queue_lib.db import pause_conditions

# Two probes, each reading one index entry: is a task of the key running (an
# index of the running keyed rows), and is this row the first ready one of its
# key in claim order (the keyed ready rows, in claim order within a key).
_LOCK_KEY_FREE = (
    "({row}.lock_key IS NULL OR ("
    "{key_idle}"
    " AND {row}.id = (SELECT head.id FROM {table} AS head"
    " WHERE {head_hot}head.lock_key = {row}.lock_key AND head.{keyed_status} = 'pendente'"
    " AND head.data_hora <= {now}"
    " ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1)))"
)

# The first probe: no task of the candidate's key is running. A dialect whose planner
# does not run this as a probe of one entry passes its own spelling (db/mysql/lock_keys.py).
KEY_IDLE = (
    "NOT EXISTS (SELECT 1 FROM {table} AS held"
    " WHERE {held_hot}held.lock_key = {row}.lock_key AND held.status = 'processando')"
)


def lock_key_free(
    table: str,
    row: str,
    now: str,
    key_idle: str = KEY_IDLE,
    keyed_status: str = "status",
    hot_day: int | None = None,
) -> str:
    """SQL: the candidate ``row`` of ``table`` is not held back by its lock_key (all
    arguments are identifiers, expressions or templates of this library, never user input).

    ``keyed_status``: the column the key index holds a keyed row's status in (MySQL's
    ``lock_key_status``, NULL on unkeyed rows: db/mysql/indexes.sql says why).
    ``hot_day``: the partition key of the unfinished rows, on a partitioned table (the
    probes then read that partition alone; db/postgres/layout.py)."""

    def hot(alias: str) -> str:
        return "" if hot_day is None else f"{alias}.finished_day = {int(hot_day)} AND "

    idle = key_idle.format(table=table, row=row, held_hot=hot("held"))
    return _LOCK_KEY_FREE.format(
        table=table,
        row=row,
        now=now,
        key_idle=idle,
        keyed_status=keyed_status,
        head_hot=hot("head"),
    )


def limits_free(limits_table: str, row: str, now: str) -> str:
    """SQL: the candidate ``row``'s processo has no limits (those tasks are claimed by the
    limited claim only) and is not paused, nor is the queue (db/pause_conditions.py);
    ``now``: the dialect's pause clock (``LimitsDialect.pause_clock``). The arguments are
    this library's identifiers and expressions, never user input."""
    # OFFSET 0 keeps it a per-row probe: PostgreSQL would otherwise plan the
    # claim as an anti-join and leave the claim index's order.
    return (
        f"{pause_conditions.queue_running(limits_table, now)}"
        f" AND NOT EXISTS (SELECT 1 FROM {limits_table} AS lim"
        f" WHERE lim.processo = {row}.processo AND {pause_conditions.held('lim', now)}"
        " LIMIT 1 OFFSET 0)"
    )


@dataclasses.dataclass(frozen=True)
class Deliverable:
    """A dialect's spelling of "the claiming worker handles the candidate": ``subscriber``
    over ``{row}`` and ``{handled}`` (the handled subscriber ids; NULL: every one),
    ``processo`` over ``{row}`` and ``{processos}`` (NULL: every processo)."""

    subscriber: str
    processo: str

    def __call__(self, row: str, handled: str, processos: str | None = None) -> str:
        """SQL: the candidate ``row`` is one the claiming worker handles: not a delivery, or
        one of a handled subscriber, and (with ``processos``) of a handled processo.
        ``row``, ``handled`` and ``processos`` are this library's identifiers or
        placeholders, never input."""
        condition = self.subscriber.format(row=row, handled=handled)
        if processos is None:
            return condition
        return f"{condition} AND {self.processo.format(row=row, processos=processos)}"
