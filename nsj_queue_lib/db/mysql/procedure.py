"""One CALL of a stored procedure that returns one result set, on a PyMySQL connection.

The claim procedure's row and the CALL's own end come back in one read: the
worker pays one round trip per task.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

Statement = tuple[str, "Mapping[str, Any] | None"]


@dataclasses.dataclass
class Result:
    rowcount: int
    names: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


class StatementFailed(Exception):
    """The statement failed; ``error`` is the driver's error (also ``__cause__``)."""

    def __init__(self, error: BaseException):
        super().__init__(f"the statement failed: {error}")
        self.error = error


def _result(cur: Any) -> Result:
    names = tuple(col[0] for col in cur.description) if cur.description else ()
    rows = tuple(cur.fetchall()) if cur.description else ()
    return Result(cur.rowcount, names, rows)


def call_procedure(conn: Any, statement: Statement) -> Result:
    """One ``CALL`` of a procedure that returns one result set: that result.

    Raises ``StatementFailed`` when the procedure fails, before its result
    set or after it (a statement the procedure runs after its select).
    """
    sql, params = statement
    with conn.cursor() as cur:
        try:
            cur.execute(sql, params)
            result = _result(cur)
            while cur.nextset():  # the CALL's own status comes last
                pass
        except Exception as exc:
            raise StatementFailed(exc) from exc
    return result
