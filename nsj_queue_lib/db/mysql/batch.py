"""Several statements in one round trip on PyMySQL connections.

Each round trip through PyMySQL costs far more client CPU than the server
spends on a short statement, so the worker sends the statements of a step
(complete, release, commit, claim) together when the connection was opened
with ``CLIENT.MULTI_STATEMENTS``; otherwise they go one by one with the
same results. Parameters are escaped by PyMySQL (``mogrify``) before the
texts are joined: no value is ever formatted into SQL by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

Statement = tuple[str, "Mapping[str, Any] | None"]


@dataclasses.dataclass
class Result:
    rowcount: int
    names: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


class StatementFailed(Exception):
    """Statement ``index`` of a batch failed; the ones before it ran, the ones after did not."""

    def __init__(self, index: int, error: BaseException, results: list[Result]):
        super().__init__(f"statement {index + 1} of the batch failed: {error}")
        self.index = index
        self.error = error
        self.results = results


# pymysql.constants.CLIENT.MULTI_STATEMENTS, a protocol constant; asked once
# per task, where an import statement in the function showed in profiles.
CLIENT_MULTI_STATEMENTS = 1 << 16


def accepts_multi_statements(conn) -> bool:
    return bool(getattr(conn, "client_flag", 0) & CLIENT_MULTI_STATEMENTS)


def _result(cur) -> Result:
    names = tuple(col[0] for col in cur.description) if cur.description else ()
    rows = tuple(cur.fetchall()) if cur.description else ()
    return Result(cur.rowcount, names, rows)


def run_batch(conn, statements: Sequence[Statement]) -> list[Result]:
    """Run ``statements`` in order; one result per statement.

    Raises ``StatementFailed`` (the driver's error as ``error`` and
    ``__cause__``) when one fails; the server runs none after it.
    """
    results: list[Result] = []
    with conn.cursor() as cur:
        if not accepts_multi_statements(conn):
            for sql, params in statements:
                try:
                    cur.execute(sql, params)
                except Exception as exc:
                    raise StatementFailed(len(results), exc, results) from exc
                results.append(_result(cur))
            return results
        text = ";\n".join(cur.mogrify(sql, params) for sql, params in statements)
        try:
            cur.execute(text)
            results.append(_result(cur))
            while cur.nextset():
                results.append(_result(cur))
        except Exception as exc:
            raise StatementFailed(len(results), exc, results) from exc
    if len(results) != len(statements):
        raise RuntimeError(f"a batch of {len(statements)} statements gave {len(results)} results")
    return results


def call_procedure(conn, statement: Statement) -> Result:
    """One ``CALL`` of a procedure that returns one result set: that result.

    Raises ``StatementFailed`` (index 0) when the procedure fails, before its
    result set or after it (a statement the procedure runs after its select).
    """
    sql, params = statement
    with conn.cursor() as cur:
        try:
            cur.execute(sql, params)
            result = _result(cur)
            while cur.nextset():  # the CALL's own status comes last
                pass
        except Exception as exc:
            raise StatementFailed(0, exc, []) from exc
    return result
