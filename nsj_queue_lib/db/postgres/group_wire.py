"""A commit group's end in one round trip: its successes settled, the next group claimed, the
commit.

Sent as three statements of one pipeline (wire.py's prepared statements, so
neither the settling statement nor the claim is parsed and planned again):

1. the settling statement: every success of the group 'sucesso' with its
   ``mensagem``, and the liveness locks of all of them released;
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
    _COMMAND_OK,
    _REPREPARE,
    _TUPLES_OK,
    PreparedRoundTrip,
    RoundTripError,
    Steps,
    _encode,
    _error,
    _flush,
    _leave_pipeline,
    _next_results,
    _status,
    drive,
)


def settle_sql(queue_table: str) -> str:
    """The settling statement: $1 the tasks' ids (bigint[]), $2 their messages (text[], in the
    same order), $3 the queue's lock key. One row: (rows settled, locks released)."""
    return (
        "WITH settled AS ("
        f" UPDATE {queue_table} AS t SET status = 'sucesso',"
        # Each row's mensagem by its id's position in $1, not a join with the unnested arrays:
        # planned generically (prepared, no statistics), the join became a nested loop over
        # the arrays once the table held a backlog (issue 16: the settle 1.2-1.3x as slow on
        # 50,000 rows as on 5,000; this form 1.1x, benchmarks/settle_backlog.py).
        " mensagem = ($2::text[])[array_position($1::bigint[], t.id)]"
        # = ANY: an index scan by id, whatever the table's statistics say.
        " WHERE t.id = ANY($1::bigint[]) AND t.status = 'processando' RETURNING t.id"
        ") SELECT (SELECT count(*) FROM settled) AS settled,"
        # Advisory unlocks are not transactional, as in the claim function.
        " count(*) FILTER (WHERE pg_advisory_unlock($3::int4, (done.id % 2147483648)::int4))"
        " AS unlocked FROM unnest($1::bigint[]) AS done(id)"
    )


def settle_statement(queue_table: str) -> PreparedRoundTrip:
    return PreparedRoundTrip(settle_sql(queue_table), ("settled", "unlocked"))


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
    sending = []
    for statement, params in statements:
        state, fresh = statement._state_for(conn)
        try:
            encoded = [_encode(value, state.encoding) for value in params]
        except (TypeError, ValueError, UnicodeEncodeError) as exc:
            raise RoundTripError(psycopg.DataError(str(exc)), []) from exc  # nothing was sent
        sending.append((statement, state, fresh, encoded))
    pgconn = conn.pgconn
    pgconn.enter_pipeline_mode()
    replies = []
    try:
        for statement, state, fresh, encoded in sending:
            if fresh:
                pgconn.send_prepare(state.name, statement._sql_bytes)
            if state.name:
                pgconn.send_query_prepared(state.name, encoded, None, psycopg.pq.Format.BINARY)
            else:
                pgconn.send_query_params(
                    statement._sql_bytes, encoded, None, None, psycopg.pq.Format.BINARY
                )
        pgconn.send_query_params(commit, None)
        pgconn.pipeline_sync()
        yield from _flush(pgconn)
        for _statement, _state, fresh, _encoded in sending:
            prepared = (yield from _next_results(pgconn)) if fresh else None
            replies.append((prepared, (yield from _next_results(pgconn))))
        committed = yield from _next_results(pgconn)
        yield from _next_results(pgconn)  # the sync
    finally:
        _leave_pipeline(conn)
    rows = []
    for (statement, state, fresh, _encoded), (prepared, result) in zip(
        sending, replies, strict=True
    ):
        if fresh and _status(prepared) == _COMMAND_OK:
            statement._states[conn] = state
        last = result[-1] if result else None
        if last is None or last.status != _TUPLES_OK:
            failed = prepared if fresh and _status(prepared) != _COMMAND_OK else result
            error = _error(failed, conn)
            if isinstance(error, _REPREPARE):
                statement.forget(conn)
            raise RoundTripError(error, [])
        rows.append(statement._rows(state, last))
    if _status(committed) != _COMMAND_OK:
        raise RoundTripError(_error(committed, conn), rows[-1])
    return rows
