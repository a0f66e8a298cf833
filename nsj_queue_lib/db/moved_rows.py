"""Statements that meet a row just moved to another partition, run again.

On the partitioned layout (``db/postgres/layout.py``) a task's end moves its row from
the unfinished rows' partition to its day's. A statement that locks or updates the row
meanwhile (it waited for the mover's commit, or its snapshot predates it) fails with
SQLSTATE 40001, even under READ COMMITTED: PostgreSQL does not follow a row across
partitions. The same statement run again sees the row where it is now. In the caller's
transaction it runs under a savepoint, so that the failure undoes that statement alone
instead of aborting the transaction (the claims own their transactions and retry them
whole: ``claim_uncommitted``). Shared by the PostgreSQL stores and the dialect-neutral
workflow store (which uses it on PostgreSQL only); it needs no driver module: it reads
the SQLSTATE psycopg 3 and psycopg2 both put on their errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

MOVED_SQLSTATE = "40001"
# Each retry follows a commit that moved the row; more than a few in a row is not a move.
ATTEMPTS = 5
SAVEPOINT = "nsjq_moved_row"
IDLE = 0  # libpq's PQTRANS_IDLE (psycopg 3 and psycopg2 report libpq's values)


def is_moved_row(exc: BaseException | None) -> bool:
    """The error, or one it was raised from, is a serialization failure (40001)."""
    while exc is not None:
        code = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
        if code == MOVED_SQLSTATE:
            return True
        exc = exc.__cause__
    return False


def retry_moved_rows(conn: Any, statement: Callable[[], T]) -> T:
    """``statement()`` (statements on ``conn``, psycopg 3 or psycopg2), run again when it
    fails on a moved row; under a savepoint unless ``conn`` is in autocommit outside a
    transaction (the failed statement then ended its own). Other errors propagate as they
    are, the transaction left as the error left it."""
    guarded = not (getattr(conn, "autocommit", False) and _status(conn) == IDLE)
    for attempt in range(1, ATTEMPTS + 1):
        if guarded:
            _execute(conn, f"SAVEPOINT {SAVEPOINT}")
        try:
            result = statement()
        except Exception as exc:
            if attempt == ATTEMPTS or not is_moved_row(exc):
                raise
            if guarded:
                _execute(conn, f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
            continue
        if guarded:
            _execute(conn, f"RELEASE SAVEPOINT {SAVEPOINT}")
        return result
    raise AssertionError("unreachable: the last attempt returns or raises")


def _status(conn: Any) -> int:
    info = getattr(conn, "info", None)
    return int(getattr(info, "transaction_status", IDLE))


def _execute(conn: Any, sql: str) -> None:
    with conn.cursor() as cur:
        cur.execute(sql)
