"""A commit group's end in one round trip: its successes settled, the next group claimed, the
commit.

Sent as three statements of one pipeline (wire.py's prepared statements, so
neither the settling statement nor the claim is parsed and planned again):

1. the settle function: every success of the group 'sucesso' with its ``mensagem``, then
   the liveness locks of all of them released; an error (the fence) when one of them is
   no longer 'processando', which aborts the claim and the commit after it;
2. the claim function, claiming the next group (``claim_limit`` 0: none);
3. ``COMMIT AND CHAIN`` (or ``COMMIT``).

Before, the settling statement was a round trip of its own through a psycopg
cursor, parsed and planned with every group: about as much of the worker's
and the server's time as the claim itself. A failure of any of the three
leaves nothing of the group committed, as a failed commit did before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from nsj_queue_lib.db.postgres.wire import (
    COMMAND_OK,
    REPREPARE,
    TUPLES_OK,
    PreparedRoundTrip,
    RoundTripError,
    Steps,
    drive,
    flush,
    leave_pipeline,
    next_results,
    result_error,
    result_status,
)


def settle_sql(settle_function: str) -> str:
    """The settling statement: $1 the tasks' ids (bigint[]), $2 their messages (text[], in the
    same order), $3 the queue's lock key. One row: the rows settled. The settle function
    (claim_function.sql) raises NQ001 when a task is no longer 'processando' (the fence)."""
    return f"SELECT {settle_function}($1::bigint[], $2::text[], $3::int4) AS settled"


def settle_statement(settle_function: str) -> PreparedRoundTrip:
    return PreparedRoundTrip(settle_sql(settle_function), ("settled",))


def text_array(values: Iterable[str]) -> str:
    """``values`` as a PostgreSQL array literal, in order (a parameter sent as text)."""
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return "{" + ",".join(quoted) + "}"


def settle_params(written: Sequence[tuple[Any, str]], queue_key: int) -> tuple[str, str, int]:
    """The settling statement's parameters for ``written`` (tasks with their mensagem)."""
    ids = "{" + ",".join(str(int(task.id)) for task, _ in written) + "}"
    return ids, text_array(mensagem for _, mensagem in written), queue_key


def run(
    conn: psycopg.Connection,
    statements: Sequence[tuple[PreparedRoundTrip, Sequence[Any]]],
    commit: bytes,
) -> list[list[dict[str, Any]]]:
    """Each statement with its parameters, then ``commit``, in one round trip; each statement's
    rows. Raises ``RoundTripError`` (its ``rows``: the last statement's, when only the commit
    failed), ``psycopg.OperationalError`` when the connection broke."""
    return drive(conn, _steps(conn, statements, commit))


def _steps(
    conn: psycopg.Connection,
    statements: Sequence[tuple[PreparedRoundTrip, Sequence[Any]]],
    commit: bytes,
) -> Steps[list[list[dict[str, Any]]]]:
    # Inside the group's transaction: its server connection cannot change under it (a
    # pooler), so a statement this session prepared is there (wire.py's invariant).
    sending = [(statement, *statement.encode(conn, params)) for statement, params in statements]
    pgconn = conn.pgconn
    pgconn.enter_pipeline_mode()
    replies = []
    try:
        for statement, state, fresh, encoded in sending:
            statement.send(pgconn, state, fresh, encoded)
        pgconn.send_query_params(commit, None)
        pgconn.pipeline_sync()
        yield from flush(pgconn)
        for _statement, _state, fresh, _encoded in sending:
            prepared = (yield from next_results(pgconn)) if fresh else None
            replies.append((prepared, (yield from next_results(pgconn))))
        committed = yield from next_results(pgconn)
        yield from next_results(pgconn)  # the sync
    finally:
        leave_pipeline(conn)
    rows = []
    for (statement, state, fresh, _encoded), (prepared, result) in zip(
        sending, replies, strict=True
    ):
        if fresh and result_status(prepared) == COMMAND_OK:
            statement.remember(conn, state)
        last = result[-1] if result else None
        if last is None or last.status != TUPLES_OK:
            failed = prepared if fresh and result_status(prepared) != COMMAND_OK else result
            error = result_error(failed, conn)
            if isinstance(error, REPREPARE):
                statement.forget(conn)
            raise RoundTripError(error, [])
        rows.append(statement.rows_of(state, last))
    if result_status(committed) != COMMAND_OK:
        raise RoundTripError(result_error(committed, conn), rows[-1])
    return rows
