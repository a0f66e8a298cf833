"""The limits table's statements (``limits.sql`` of each dialect) for one queue.

``claim_one`` is the limited claim: under the lock of every limits row of the
queue it reads, per limited processo with a ready task, the declaration, the
shared state and the count of its running tasks, lets ``flow.limits.decide``
choose, marks one task 'processando' and writes the processo's new state, in
the caller's transaction (left open: the caller takes the task's liveness
lock, then commits). Only PostgreSQL and MySQL/MariaDB have a limits table.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nsj_queue_lib.db.columns import query_values
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.flow.limits import (
    Decision,
    LimitState,
    ProcessoLimits,
    decide,
    wait_after_start,
)
from nsj_queue_lib.model import TaskRecord

DIALECTS = ("postgres", "mysql")
CAP_RECHECK_SECONDS = 1.0
_NOW = {"postgres": "clock_timestamp()", "mysql": "NOW(6)"}


@dataclasses.dataclass(frozen=True)
class LimitedClaim:
    """A limited claim's outcome: the task claimed (its transaction open), or None and
    ``wait``, the seconds until a held-back task may start (None: when a running one ends,
    or when a new task comes)."""

    task: TaskRecord | None
    wait: float | None = None
    limits_rows: int = 1  # 0: the queue has no limited processo at all
    locked: bool | None = None  # the liveness lock, when the claim took it
    in_transaction: bool = True  # False: nothing was claimed and no transaction is open


def _rows(cursor: Any) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


class LimitsStore:
    def __init__(self, dialect: str, queue_table: str, store: Any):
        if dialect not in DIALECTS:
            raise ValueError(f"per-processo limits are not available on {dialect}")
        self.dialect = dialect
        self.store = store
        self.sql = render_queries(
            dialect, query_values(queue_table, None, _NOW[dialect]), "limits.sql"
        )

    @contextmanager
    def _cursor(self, conn: Any, what: str) -> Iterator[Any]:
        try:
            with conn.cursor() as cur:
                yield cur
        except DatabaseError:
            raise
        except Exception as exc:
            if not _driver_error(exc):
                raise
            raise DatabaseError(f"{what} failed: {exc}".strip()) from exc

    def _run(
        self, conn: Any, name: str, params: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        with self._cursor(conn, name) as cur:
            cur.execute(self.sql[name], params)
            return _rows(cur) if cur.description else []

    # -- declarations --

    def declared(self, conn: Any) -> dict[str, ProcessoLimits]:
        return {r["processo"]: ProcessoLimits.from_row(r) for r in self._run(conn, "declared")}

    def declare(self, conn: Any, limits: ProcessoLimits, declared_by: str) -> None:
        self._run(conn, "declare", {**limits.as_params(), "declared_by": declared_by[:200]})

    def undeclare(self, conn: Any, processo: str) -> None:
        self._run(conn, "undeclare", {"processo": processo})

    # -- the limited claim --

    def claim_one(
        self, conn: Any, take_lock: bool, now: datetime.datetime | None = None
    ) -> LimitedClaim:
        """Open a transaction on ``conn`` (autocommit) and claim; see the module's docstring.

        With ``take_lock`` the claimed task's database liveness lock is taken too
        (PostgreSQL, in the claim's statement; ``locked`` says whether it was).
        Nothing claimed: the transaction is still open when ``in_transaction`` says so
        (the caller rolls back)."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        # A look without locks first (one statement, no transaction): most attempts
        # find nothing that may start, and end here.
        preview = self._run(conn, "states")
        if not preview:
            rows = int(self._run(conn, "count_limits")[0]["n"])
            return LimitedClaim(None, None, rows, in_transaction=False)
        decisions = [decide(_state(row), now) for row in preview]
        if not any(d.start for d in decisions):
            later = [_wait(d) for d in decisions]
            return LimitedClaim(None, min(later), in_transaction=False)
        startable = [r["processo"] for r, d in zip(preview, decisions, strict=True) if d.start]
        states = self._lock_and_read(conn, startable)
        waits: list[float] = []
        claimed: LimitedClaim | None = None
        for row in states:
            state = _state(row)
            decision = decide(state, now)
            if decision.start and claimed is None:
                claimed = self._take(conn, state.limits.processo, decision, take_lock)
                if claimed is not None:
                    # When this processo may start its next task, to wake up then.
                    decision = Decision(False, wait_after_start(state, decision))
            waits.append(0.0 if decision.start else _wait(decision))
        wait = min(waits) if waits else None
        if claimed is not None:
            return dataclasses.replace(claimed, wait=wait)
        return LimitedClaim(None, wait)

    def _lock_and_read(self, conn: Any, processos: list[str]) -> list[dict[str, Any]]:
        """BEGIN, the limits rows of ``processos`` locked, then (a statement of its own: a
        snapshot taken after the locks) the state of the limited processos with a ready
        task."""
        if self.dialect != "postgres":
            with self._cursor(conn, "begin"):
                conn.begin()
            self._run(conn, "lock_limits", {"processos": tuple(processos)})
            return self._run(conn, "states")
        # One round trip: the statements run in order, the second after the first's locks.
        with self._cursor(conn, "limited claim") as lock_cur, conn.cursor() as states_cur:
            with conn.pipeline():
                conn.execute("BEGIN")
                lock_cur.execute(self.sql["lock_limits"], {"processos": processos})
                states_cur.execute(self.sql["states"])
            return _rows(states_cur)

    def _take(
        self, conn: Any, processo: str, decision: Decision, take_lock: bool
    ) -> LimitedClaim | None:
        def micros(seconds: float | None) -> int | None:
            return None if seconds is None else round(seconds * 1e6)

        if self.dialect == "postgres":
            rows = self._run(
                conn,
                "take",
                {
                    "processo": processo,
                    "interval_micros": micros(decision.next_start_in),
                    "rate_micros": micros(decision.rate_tat_in),
                    "take_lock": take_lock,
                    "queue_key": self.store.queue_key if take_lock else 0,
                },
            )
            if not rows:
                return None
            locked = rows[0].pop("liveness_locked")
            return LimitedClaim(TaskRecord.from_row(rows[0]), locked=locked if take_lock else None)
        picked = self._run(conn, "pick", {"processo": processo})
        if not picked:
            return None  # its ready tasks are being claimed, or wait for their lock_key
        task_id = int(picked[0]["id"])
        self._run(conn, "mark", {"id": task_id})
        if decision.next_start_in is not None:
            params = {"processo": processo, "micros": micros(decision.next_start_in)}
            self._run(conn, "advance_interval", params)
        if decision.rate_tat_in is not None:
            params = {"processo": processo, "micros": micros(decision.rate_tat_in)}
            self._run(conn, "advance_rate", params)
        row = self.store.get_task(conn, task_id)
        if row is None:  # cannot happen: the row is locked by this transaction
            raise DatabaseError(f"limited claim: task {task_id} vanished")
        locked = self.lock_task(conn, task_id) if take_lock else None
        return LimitedClaim(TaskRecord.from_row(row), locked=locked)

    def lock_task(self, conn: Any, task_id: int) -> bool:
        """Take the claimed task's liveness lock on ``conn`` (database liveness locks)."""
        if self.dialect == "postgres":
            params = {"queue_key": self.store.queue_key, "task_key": self.store.task_key(task_id)}
        else:
            params = {"name": self.store.task_lock_name(conn, task_id)}
        rows = self._run(conn, "lock_task", params)
        return bool(rows) and next(iter(rows[0].values())) in (1, True)


def _wait(decision: Decision) -> float:
    """Seconds until a held-back processo may start a task. One held by max_concurrent
    starts when a running task ends, which this worker is told of when the task ran
    here (or was rescued here), and otherwise by a notification of new work: it is
    looked at again after CAP_RECHECK_SECONDS all the same, in case none comes."""
    return CAP_RECHECK_SECONDS if decision.wait is None else decision.wait


def _state(row: dict[str, Any]) -> LimitState:
    def seconds(name: str) -> float | None:
        return None if row[name] is None else float(row[name])

    return LimitState(
        ProcessoLimits.from_row(row),
        int(row["running"]),
        seconds("next_start_in"),
        seconds("rate_tat_in"),
    )


def _driver_error(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("psycopg", "pymysql"))
