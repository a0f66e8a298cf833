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
import importlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from nsj_queue_lib.db.columns import query_values
from nsj_queue_lib.db.dialect import UPGRADE_HINT, limited_routine_name
from nsj_queue_lib.db.limited_routine import POSTGRES_ARGS, limited_claim_version
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.exceptions import ClaimRoutineError, DatabaseError
from nsj_queue_lib.flow.deliveries import json_array
from nsj_queue_lib.flow.limits import EARLY_SECONDS, ProcessoLimits
from nsj_queue_lib.identifiers import split_table_name
from nsj_queue_lib.model import QUEUE_COLUMNS, TaskRecord

DIALECTS = ("postgres", "mysql")
_NOW = {"postgres": "clock_timestamp()", "mysql": "NOW(6)"}
# The function's task in the claim's shape (the payload of a later attempt from its first).
_CALL_COLUMNS = ", ".join(
    "coalesce((f.task).payload, f.first_payload) AS payload" if c == "payload" else f"(f.task).{c}"
    for c in QUEUE_COLUMNS
)


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


def _rows(cursor: Any) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


class LimitsStore:
    def __init__(self, dialect: str, queue_table: str, store: Any):
        if dialect not in DIALECTS:
            raise ValueError(f"per-processo limits are not available on {dialect}")
        self.dialect = dialect
        self.store = store
        self.queue_table = queue_table
        self.routine = limited_routine_name(queue_table)
        values = query_values(queue_table, None, _NOW[dialect])
        values["limited_claim"] = self.routine or "limited_claim_name_too_long"
        values["call_columns"] = _CALL_COLUMNS
        self.sql = render_queries(dialect, values, "limits.sql")

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

    def check(self, conn: Any) -> None:
        """Raise ``ClaimRoutineError`` (a schema to upgrade) unless the queue's limited claim
        routine is this version's."""
        routine = self.routine
        if routine is None:
            raise ClaimRoutineError(
                f"QUEUE_TABLE: {self.queue_table}'s name is too long for its limited claim "
                "routine (claim_limited_<table>_v<N>)"
            )
        schema, name = split_table_name(routine)
        if self.dialect == "postgres":
            rows = self._run(conn, "routine_version", {"signature": routine + POSTGRES_ARGS})
        else:
            rows = self._run(conn, "routine_version", {"schema": schema, "name": name})
        found = next(iter(rows[0].values())) if rows else None
        expected = limited_claim_version(self.dialect)
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
        if self.dialect == "postgres":
            commit = take_lock if commit is None else commit
            return self._claim_postgres(conn, take_lock, commit, open_windows, known_windows, early)
        return self._claim_mysql(conn, take_lock, open_windows, known_windows, early)

    def _claim_postgres(
        self,
        conn: Any,
        take_lock: bool,
        commit: bool,
        open_windows: Sequence[str],
        known_windows: Sequence[str],
        early: float,
    ) -> LimitedClaim:
        params = {
            "open": list(open_windows),
            "known": list(known_windows),
            "early": early,
            "take_lock": take_lock,
            "queue_key": self.store.queue_key,
            "handled_processos": _sorted(self.store.handled_processos),
        }
        with self._cursor(conn, "limited claim") as cur:
            try:
                with conn.pipeline():
                    conn.execute("BEGIN")
                    cur.execute(self.sql["claim"], params)
                    if commit:
                        # Kept in the pipeline: committed (and the task's transaction
                        # opened) with no round trip of its own. Nothing claimed leaves an
                        # empty transaction, rolled back below.
                        conn.execute("COMMIT AND CHAIN")
            except BaseException:
                _rollback_quietly(conn)
                raise
            row = _rows(cur)[0]
        task, locked = None, None
        if row["id"] is not None:
            locked = row.pop("liveness_locked")
            task = TaskRecord.from_row({c: row[c] for c in QUEUE_COLUMNS})
        else:
            with self._cursor(conn, "rollback"):
                conn.execute("ROLLBACK")  # the claim's transaction, empty
        return self._outcome(row, task, locked, take_lock)

    def _claim_mysql(
        self,
        conn: Any,
        take_lock: bool,
        open_windows: Sequence[str],
        known_windows: Sequence[str],
        early: float,
    ) -> LimitedClaim:
        # The dialect's JSON row reader, reached by name (db/mysql/rows.py).
        task_from_json = importlib.import_module("nsj_queue_lib.db.mysql.rows").task_from_json
        params = {
            "open": json.dumps(list(open_windows)),
            "known": json.dumps(list(known_windows)),
            "early": early,
            "take_lock": take_lock,
            "prefix": self.store.lock_prefix(conn),
            "handled_processos": json_array(self.store.handled_processos),
        }
        with self._cursor(conn, "limited claim") as cur:
            try:
                cur.execute(self.sql["claim"], params)
                row = _rows(cur)[0]
                while cur.nextset():  # the CALL's own status comes last
                    pass
            except BaseException:
                _rollback_quietly(conn)
                raise
        task, locked = None, None
        if row["task"] is not None:
            found = task_from_json(row["task"])
            got = found.pop("liveness_locked")
            locked = None if got is None else got == 1
            task = TaskRecord.from_row(found)
        return self._outcome(row, task, locked, take_lock)

    @staticmethod
    def _outcome(
        row: dict[str, Any], task: TaskRecord | None, locked: Any, take_lock: bool
    ) -> LimitedClaim:
        wait = row["wait_s"]
        return LimitedClaim(
            task,
            None if wait is None else float(wait),
            int(row["limits_rows"]),
            locked=bool(locked) if take_lock and task is not None else None,
            in_transaction=task is not None,
            stale_windows=bool(row["stale_windows"]),
        )


def _rollback_quietly(conn: Any) -> None:
    try:
        conn.rollback()
    except Exception:  # noqa: BLE001 - a broken connection rolled back already
        pass


def _driver_error(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("psycopg", "pymysql"))


def _sorted(handled: frozenset[str] | None) -> list[str] | None:
    return None if handled is None else sorted(handled)
