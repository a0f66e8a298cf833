"""What every dialect's inspection store shares: the columns it shows, the filters, the rows.

An inspection store (``queue_store.InspectionStore``) serves the ``nsjq``
command: aggregates for ``status``, a page of tasks, the attempts of one
task, and the manual retry of an exhausted task. Each dialect writes its
queries in ``db/<dialect>/inspection.sql``; times leave every dialect the
same way: aware ``datetime`` objects in UTC, read as instants (epoch seconds
on the MySQL family, whose session time zone would otherwise shift them).
"""

from __future__ import annotations

import abc
import dataclasses
import datetime
import decimal
from collections.abc import Sequence
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.db import tally
from nsj_queue_lib.db.dialect import workers_table_name

# An attempt as the inspection queries show it: the contract's columns but the
# payload's hash (binary, never useful to an operator); the payload only where asked.
# And its timeline: when it started and ended, on which worker.
ATTEMPT_COLUMNS = (
    *(c for c in model.QUEUE_COLUMNS if c not in ("payload", "payload_hash")),
    *model.ATTEMPT_COLUMNS,
)
TIME_COLUMNS = (
    "data_hora_inicial",
    "data_hora",
    "proxima_tentativa",
    "data_hora_anterior",
    "started_at",
    "finished_at",
)
# A failed attempt's statuses; one of them with estouro_tentativas is a task that ran out
# of attempts (its dead letter was enqueued, or it was a dead letter itself).
FAILED_STATUSES = (model.FALHA, model.FALHA_PROCESSANDO)
# Aggregates of status: the window of "recent" failures and dead letters.
RECENT_SECONDS = 24 * 3600
# summary_tallied on the partitioned layouts: the mark {recent_t} renders to, replaced per
# call by the bound of the day partitions it reads finished attempts from (the days from
# RECENT_DAYS before the tally's last fold).
RECENT_MARK = "/*recent*/"
RECENT_DAYS = 2
# ``recent``: the settled attempts of the last hour, counted per 5 minutes.
RECENT_WINDOW = 3600
RECENT_BUCKET = 300
# ... and of these, the ones that ended in the last 5 minutes: the console's rate.
RATE_WINDOW = 300

# What summary_tallied reads of an attempt.
TALLY_COLUMNS = (
    "t.processo, t.status, t.reenfileirado, t.data_hora, t.dead, t.id_inicial, t.data_hora_inicial"
)

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)

# The attempt that follows an exhausted one (``f``), built as fail_and_retry's next
# attempt (queries.sql) but 'pendente' and due at ``f.proxima_tentativa``.
NEXT_ATTEMPT_COLUMNS = (
    "id_inicial, data_hora_inicial, data_hora, origem, destino, processo, chave_externa, "
    "tentativa, status, id_anterior, data_hora_anterior, status_anterior, mensagem_anterior, "
    "tenant, grupo_empresarial, payload_hash, pub_sub, publication_id, subscriber_id, "
    "dead, live_id, prioridade, payload"
)
NEXT_ATTEMPT_VALUES = (
    "COALESCE(f.id_inicial, f.id), f.data_hora_inicial, f.proxima_tentativa, f.origem, "
    "f.destino, f.processo, f.chave_externa, f.tentativa + 1, 'pendente', f.id, f.data_hora, "
    "f.status, f.mensagem, f.tenant, f.grupo_empresarial, f.payload_hash, f.pub_sub, "
    "f.publication_id, f.subscriber_id, f.dead, f.live_id, f.prioridade, "
    # Kept where the first attempt's day may be dropped (see fail_and_retry).
    "CASE WHEN f.id_inicial IS NOT NULL THEN f.payload END"
)


def task_filter(status_in: str, from_epoch: str) -> str:
    """``list_tasks``' condition for ``TaskFilter.parameters()``: each filter is switched off by
    its flag. ``status_in`` tests ``t.status`` against the list ``%(statuses)s``;
    ``from_epoch`` turns ``{p}``, epoch seconds, into a time."""
    return "\n  AND ".join(
        [
            "(%(all_attempts)s OR NOT COALESCE(t.reenfileirado, false))",
            f"(NOT %(by_status)s OR {status_in})",
            "(NOT %(by_processo)s OR t.processo = %(processo)s)",
            "(NOT %(by_chave)s OR t.chave_externa = %(chave_externa)s)",
            f"(NOT %(by_since)s OR t.data_hora_inicial >= {from_epoch.format(p='%(since)s')})",
            f"(NOT %(by_until)s OR t.data_hora_inicial < {from_epoch.format(p='%(until)s')})",
            "(NOT %(by_before)s OR t.id < %(before_id)s)",
            "(NOT %(exhausted)s OR (t.estouro_tentativas AND t.status IN ('falha', 'falha_processando')))",
        ]
    )


def query_values(queue_table: str, time_column: str, task_filter: str) -> dict[str, str]:
    """The placeholders of a dialect's ``inspection.sql``: ``time_column`` formats a time
    column (``{c}``) as an instant the store reads, ``task_filter`` is ``task_filter()``'s."""
    return {
        "queue_table": queue_table,
        "workers_table": workers_table_name(queue_table),
        "task_filter": task_filter,
        "attempt_columns": attempt_columns(time_column),
        "attempt_columns_with_payload": attempt_columns(time_column, "t.payload"),
        "next_attempt_columns": NEXT_ATTEMPT_COLUMNS,
        "next_attempt_values": NEXT_ATTEMPT_VALUES,
        # summary_tallied (db/tally.py): what it counts of an attempt, the tally's tables,
        # and the pin of a look-up of unfinished attempts (PostgreSQL's partitioned layout).
        "tally_columns": TALLY_COLUMNS,
        "hot_h": "",
        "hot_t": "",
        "recent_t": "",
        **tally.table_values(queue_table),
    }


def attempt_columns(time_column: str, payload: str | None = None) -> str:
    """The select list of an attempt (table alias ``t``).

    ``time_column`` formats one time column as the dialect reads it as an instant
    (``{c}`` is the column's name); ``payload`` is the expression of the payload, if any.
    """
    parts = [
        f"{time_column.format(c=c)} AS {c}" if c in TIME_COLUMNS else f"t.{c}"
        for c in ATTEMPT_COLUMNS
    ]
    if payload is not None:
        parts.append(f"{payload} AS payload")
    return ", ".join(parts)


def as_utc(value: Any) -> datetime.datetime | None:
    """A time column's value as an aware UTC datetime: from a datetime (aware) or epoch seconds."""
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            return value.replace(tzinfo=datetime.timezone.utc)
        return value.astimezone(datetime.timezone.utc)
    seconds = decimal.Decimal(str(value))
    whole = int(seconds)
    micros = int(((seconds - whole) * 1_000_000).to_integral_value())
    return _EPOCH + datetime.timedelta(seconds=whole, microseconds=micros)


def attempt_row(row: dict[str, Any]) -> dict[str, Any]:
    """An attempt as the store returns it: times in UTC, flags as bools, ids as ints."""
    out = dict(row)
    for column in TIME_COLUMNS:
        if column in out:
            out[column] = as_utc(out[column])
    for column in ("reenfileirado", "estouro_tentativas", "pub_sub", "dead"):
        if column in out and out[column] is not None:
            out[column] = bool(out[column])
    return out


def _seconds(value: Any) -> float | None:
    """An interval the database computed, in seconds (None stays None)."""
    return None if value is None else round(float(value), 3)


def recent_days_pin(cur: Any, days_sql: str) -> str:
    """summary_tallied's bound of the finished attempts it reads from the table (the
    partitioned layouts), from ``days_sql``'s one row: the dialect's day RECENT_DAYS
    before the tally's last fold (NULL before the first fold) and the day after today.
    The attempts read are the ones past the last fold, and the open ones that ended
    since; either ended after the fold before it, so only after a pause of the tally of
    two days (every worker stopped) could one end earlier, and the next fold counts it.
    No attempt ends in the future (its day is the database clock's when it ended), and
    the upper bound leaves out the partitions made ahead, which planning the statement
    on a new session otherwise opened: 21 ms against 5 with 14 days ahead."""
    cur.execute(days_sql)
    first, last = cur.fetchone()
    if first is None:
        return f"t.finished_day <= {int(last)} AND "
    return f"t.finished_day BETWEEN {int(first)} AND {int(last)} AND "


def summary_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row of ``summary``: counts as ints (the MySQL family sums to a Decimal)."""
    out = dict(row)
    for name in ("tasks", "failed_24h", "dead_24h"):
        out[name] = 0 if out[name] is None else int(out[name])
    out["oldest_ready_seconds"] = _seconds(out["oldest_ready_seconds"])
    return out


def depth_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row of ``depth``: the count as an int, the oldest ready task's age in seconds."""
    return dict(
        row,
        tasks=int(row["tasks"]),
        oldest_ready_seconds=_seconds(row["oldest_ready_seconds"]),
    )


def listed_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row of ``list_tasks``: an attempt and its age in seconds (since its data_hora)."""
    return dict(attempt_row(row), age_seconds=_seconds(row["age_seconds"]))


@dataclasses.dataclass(frozen=True)
class TaskFilter:
    """Which tasks ``list_tasks`` returns; every value reaches the database as a parameter.

    ``since``/``until`` bound the task's first due time (``data_hora_inicial``) as
    aware datetimes; ``all_attempts`` lists every attempt instead of each task's
    latest one; ``before_id`` keeps the attempts whose id is below it (a cursor:
    the last id of the page before); ``exhausted`` keeps the attempts that ran out
    of attempts (what ``retry_task`` accepts).
    """

    statuses: Sequence[str] = ()
    processo: str | None = None
    chave_externa: str | None = None
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None
    all_attempts: bool = False
    before_id: int | None = None
    exhausted: bool = False

    def parameters(self) -> dict[str, Any]:
        """The bound values of the listing query; absent filters are switched off by a flag."""
        return {
            "by_status": bool(self.statuses),
            # Never an empty list: MySQL cannot bind ``IN ()``.
            "statuses": list(self.statuses) or [""],
            "by_processo": self.processo is not None,
            "processo": self.processo or "",
            "by_chave": self.chave_externa is not None,
            "chave_externa": self.chave_externa or "",
            "by_since": self.since is not None,
            "since": _epoch(self.since),
            "by_until": self.until is not None,
            "until": _epoch(self.until),
            "all_attempts": self.all_attempts,
            "by_before": self.before_id is not None,
            "before_id": self.before_id or 0,
            "exhausted": self.exhausted,
        }


def _epoch(moment: datetime.datetime | None) -> float:
    if moment is None:
        return 0.0
    if moment.tzinfo is None:
        raise ValueError("a time filter must be an aware datetime")
    return (moment - _EPOCH).total_seconds()


class InspectionQueries(abc.ABC):
    """The read operations of an ``InspectionStore`` over a dialect's ``_fetch``."""

    queue_table: str

    @abc.abstractmethod
    def _fetch(self, conn: Any, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The rows of the named query of ``inspection.sql`` as dicts."""

    def live_workers(self, conn: Any, seen_within: float) -> list[dict[str, Any]]:
        """The workers whose heartbeat is at most ``seen_within`` seconds old: worker,
        processos (a JSON array, None: every processo), started_at, seen_at. Empty where
        the workers table is missing (a schema before db_gen --upgrade)."""
        return self._fetch(conn, "live_workers", {"seen_within": seen_within})

    @abc.abstractmethod
    def tallied(self, conn: Any) -> bool:
        """Whether the queue has the tally's tables (db/tally.py), which summary then reads
        instead of the whole table."""

    def summary(self, conn: Any) -> list[dict[str, Any]]:
        name = "summary_tallied" if self.tallied(conn) else "summary"
        rows = self._fetch(conn, name, {"recent_seconds": RECENT_SECONDS})
        return [summary_row(r) for r in rows]

    def depth(self, conn: Any) -> list[dict[str, Any]]:
        return [depth_row(r) for r in self._fetch(conn, "depth", {})]

    def running(self, conn: Any, limit: int) -> list[dict[str, Any]]:
        """``list_tasks`` of the running attempts, by a statement of its own (PostgreSQL's
        partitioned layout pins it to the hot partition)."""
        return [listed_row(r) for r in self._fetch(conn, "list_running", {"limit": limit})]

    def list_tasks(
        self, conn: Any, filters: TaskFilter, limit: int, offset: int
    ) -> list[dict[str, Any]]:
        params = dict(filters.parameters(), limit=limit, offset=offset)
        return [listed_row(r) for r in self._fetch(conn, "list_tasks", params)]

    def recent(self, conn: Any) -> list[dict[str, Any]]:
        """The settled attempts due in the last RECENT_WINDOW seconds per bucket (of
        RECENT_BUCKET seconds, 0 the newest), processo, status and ``dead``: ``tasks``,
        and ``finished_recently``, those of them that ended in the last RATE_WINDOW."""
        params = {"window": RECENT_WINDOW, "bucket": RECENT_BUCKET, "rate_window": RATE_WINDOW}
        return [
            {
                "bucket": int(r["bucket"]),
                "processo": r["processo"],
                "status": r["status"],
                "dead": bool(r["is_dead"]),
                "tasks": int(r["tasks"]),
                "finished_recently": int(r["finished_recently"]),
            }
            for r in self._fetch(conn, "recent", params)
        ]

    def running_by_worker(self, conn: Any) -> dict[str | None, int]:
        """How many attempts each worker runs now, by its name (None: rows of 1.2.2's
        workers, which write no name)."""
        rows = self._fetch(conn, "running_by_worker", {})
        return {r["worker"]: int(r["tasks"]) for r in rows}

    def task_chain(self, conn: Any, task_id: int) -> list[dict[str, Any]]:
        return [attempt_row(r) for r in self._fetch(conn, "task_chain", {"id": task_id})]

    def task_attempts(self, conn: Any, task_id: int) -> list[dict[str, Any]]:
        return [attempt_row(r) for r in self._fetch(conn, "task_attempts", {"id": task_id})]
