"""The limits table's statements (``limits.sql`` of each dialect) and the limited claim.

``claim`` is the limited claim: one call of the queue's limited claim routine
(``claim_limited_<queue>_v<N>``, db/<dialect>/limited_claim.sql), which picks
the limited processo whose next start is due first, locks its limits row,
waits there until the start is due (the worker calls a little ahead), marks
one task 'processando' and moves the processo's state on. On PostgreSQL the
BEGIN, the call and the commit travel in one round trip (a pipeline); on
MySQL/MariaDB the CALL commits itself. Only PostgreSQL and MySQL/MariaDB have
a limits table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from nsj_queue_lib.db.dialect import UPGRADE_HINT, limited_routine_name
from nsj_queue_lib.db.driver import driver_class
from nsj_queue_lib.db.limited_routine import limited_claim_version
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.exceptions import ClaimRoutineError, DatabaseError
from nsj_queue_lib.flow.limits import EARLY_SECONDS, ProcessoLimits, limits_table_name
from nsj_queue_lib.model import TaskRecord


@dataclasses.dataclass(frozen=True)
class LimitedClaim:
    """A limited claim's outcome: the task claimed (its transaction open), or None; and
    ``wait``, the seconds until a held-back task may start (None: no limited processo has a
    ready task)."""

    task: TaskRecord | None
    wait: float | None = None
    limits_rows: int = 1  # 0: the queue has no limited processo at all
    locked: bool | None = None  # the liveness lock, when the claim took it
    in_transaction: bool = True  # False: nothing was claimed and no transaction is open
    stale_windows: bool = False  # a processo has time windows this worker does not know


@dataclasses.dataclass(frozen=True)
class ClaimRequest:
    """What ``LimitsStore.claim`` asks the dialect's limited claim call for."""

    take_lock: bool
    commit: bool | None
    open_windows: Sequence[str]
    known_windows: Sequence[str]
    early: float


def rows(cursor: Any) -> list[dict[str, Any]]:
    """The rows of ``cursor``'s result as dicts."""
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


class LimitsStore:
    def __init__(self, dialect: str, queue_table: str, store: Any):
        """The limits of ``queue_table`` in ``dialect`` (``Driver.name``); ``store``: the
        worker's queue store, bound (the claim reads its lock keys and handled processos)."""
        own = driver_class(dialect).limits()
        if own is None:
            raise ValueError(f"per-processo limits are not available on {dialect}")
        self.limits_dialect = own
        self.store = store
        self.queue_table = queue_table
        self.routine = limited_routine_name(queue_table)
        values = {
            **own.query_values,
            "limits_table": limits_table_name(queue_table),
            "limited_claim": self.routine or "limited_claim_name_too_long",
        }
        self.sql = render_queries(own.name, values, "limits.sql")

    @contextmanager
    def cursor(self, conn: Any, what: str) -> Iterator[Any]:
        """A cursor of ``conn`` whose driver errors are ``DatabaseError``s naming ``what``."""
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
        with self.cursor(conn, name) as cur:
            cur.execute(self.sql[name], params)
            return rows(cur) if cur.description else []

    # -- declarations --

    def declared(self, conn: Any) -> dict[str, ProcessoLimits]:
        return {r["processo"]: ProcessoLimits.from_row(r) for r in self._run(conn, "declared")}

    def declare(self, conn: Any, limits: ProcessoLimits, declared_by: str) -> None:
        self._run(conn, "declare", {**limits.as_params(), "declared_by": declared_by[:200]})

    def undeclare(self, conn: Any, processo: str) -> None:
        self._run(conn, "undeclare", {"processo": processo})

    # -- the limited claim --

    def check(self, conn: Any) -> None:
        """Raise ``ClaimRoutineError`` (a schema to upgrade) unless the queue's limited claim
        routine is this version's."""
        routine = self.routine
        if routine is None:
            raise ClaimRoutineError(
                f"QUEUE_TABLE: {self.queue_table}'s name is too long for its limited claim "
                "routine (claim_limited_<table>_v<N>)"
            )
        params = self.limits_dialect.routine_version_params(routine)
        found_rows = self._run(conn, "routine_version", params)
        found = next(iter(found_rows[0].values())) if found_rows else None
        expected = limited_claim_version(self.limits_dialect)
        if found != expected:
            state = "is missing" if found is None else f"is from another version ({found!r})"
            raise ClaimRoutineError(
                f"the queue's limited claim routine {routine} {state}; this worker declares "
                f"per-processo limits and needs {expected!r}. Bring the queue up to date with "
                f"{UPGRADE_HINT} (run its output once), then start the worker again"
            )

    def claim(
        self,
        conn: Any,
        take_lock: bool,
        open_windows: Sequence[str] = (),
        known_windows: Sequence[str] = (),
        early: float = EARLY_SECONDS,
        commit: bool | None = None,
    ) -> LimitedClaim:
        """One call of the limited claim routine on ``conn`` (autocommit), in one round trip.

        With ``take_lock`` the claimed task's database liveness lock is taken. With
        ``commit`` (default: ``take_lock``; always so on MySQL) the claim is committed and
        the task's transaction opened; otherwise the claim's transaction is left open for
        the caller (who takes a lock elsewhere, then commits). Nothing claimed: no
        transaction is open. ``open_windows``, ``known_windows``: flow.limits.window_states.
        """
        request = ClaimRequest(take_lock, commit, open_windows, known_windows, early)
        claim: LimitedClaim = self.limits_dialect.claim(self, conn, request)
        return claim


def outcome(
    row: dict[str, Any], task: TaskRecord | None, locked: Any, take_lock: bool
) -> LimitedClaim:
    """The ``LimitedClaim`` of the routine's ``row`` (its ``task``, if any, read already)."""
    wait = row["wait_s"]
    return LimitedClaim(
        task,
        None if wait is None else float(wait),
        int(row["limits_rows"]),
        locked=bool(locked) if take_lock and task is not None else None,
        in_transaction=task is not None,
        stale_windows=bool(row["stale_windows"]),
    )


def rollback_quietly(conn: Any) -> None:
    """Roll ``conn`` back, if it is not broken already."""
    try:
        conn.rollback()
    except Exception:  # noqa: BLE001 - a broken connection rolled back already
        pass


def _driver_error(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("psycopg", "pymysql"))
