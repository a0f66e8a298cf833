"""The executor's hot path at the libpq level: a prepared statement and a commit in one round trip.

Every task sends the same statements (the claim function's call, then
``COMMIT AND CHAIN``). Through psycopg cursors and ``conn.pipeline()`` most
of a round trip's worker CPU goes to Python bookkeeping: a pipeline object,
cursors, query conversion, parameter dumpers and one loader per column of
every result. Here the statement's parameters are sent as text and its rows
are decoded with loaders set up once per connection (again only when the
result's column types change). Nothing is prepared in the server session
(see ``PreparedRoundTrip``).

Only psycopg's public libpq wrapper (``psycopg.pq``) and ``psycopg.adapt.
Transformer`` are used. The connection is left as psycopg expects it: out of
pipeline mode, no result pending, or closed when that cannot be guaranteed.
"""

from __future__ import annotations

import select
import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
import psycopg.errors
from psycopg import pq
from psycopg.adapt import Transformer

_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_PIPELINE_SYNC = pq.ExecStatus.PIPELINE_SYNC
_BINARY = pq.Format.BINARY
_BAD = pq.ConnStatus.BAD
_READ = select.POLLIN
_READ_WRITE = select.POLLIN | select.POLLOUT


class RoundTripError(Exception):
    """The statement or the commit after it failed.

    ``error`` is the psycopg error; ``rows`` are the statement's rows when the
    statement itself succeeded and only the commit failed (its work undone).
    """

    def __init__(self, error: psycopg.Error, rows: list[dict[str, Any]]):
        super().__init__(str(error))
        self.error = error
        self.rows = rows


class _ConnectionState:
    __slots__ = ("transformer", "column_types", "encoding")

    def __init__(self, conn: psycopg.Connection):
        self.refresh(conn)

    def refresh(self, conn: psycopg.Connection) -> None:
        """Loaders (and the parameters' encoding) for the session's current client encoding."""
        self.transformer = Transformer(conn)
        self.column_types: tuple[int, ...] | None = None  # what the loaders were set up for
        self.encoding = conn.info.encoding


class PreparedRoundTrip:
    """One statement plus a commit statement, in one round trip; client-side work prepared once.

    Pooler invariant: nothing is left in the server session. The statement is
    sent as libpq's unnamed statement (parsed with each execution), never as
    a named prepared statement: a pooler in transaction mode (PgBouncer
    ``pool_mode = transaction``) may give every transaction another server
    connection, where a statement prepared earlier does not exist, and its
    ``DISCARD ALL`` deallocates them between transactions. Parsing a one-line
    call costs the server a few microseconds; what the round trip saves is the
    client's bookkeeping, kept here per connection.

    ``columns`` name the statement's result columns in order; rows come back
    as dicts. Parameters are ints, strings or None, sent in text format.
    """

    def __init__(self, sql: str, columns: Sequence[str]):
        self.sql = sql
        self.columns = tuple(columns)
        self._sql_bytes = sql.encode()
        self._states: weakref.WeakKeyDictionary[psycopg.Connection, _ConnectionState] = (
            weakref.WeakKeyDictionary()
        )

    def run(
        self, conn: psycopg.Connection, params: Sequence[Any], commit: bytes, begin: bool = False
    ) -> list[dict[str, Any]]:
        """Execute the statement then ``commit`` (a transaction control statement) in one round
        trip; with ``begin``, in a transaction the same round trip opens.

        Raises ``RoundTripError`` when either fails, ``psycopg.OperationalError``
        when the connection broke.
        """
        state = self._states.get(conn)
        if state is None:
            state = self._states[conn] = _ConnectionState(conn)
        elif state.encoding != conn.info.encoding:
            # A handler changed client_encoding: text now arrives in the new one.
            state.refresh(conn)
        pgconn = conn.pgconn
        try:
            encoded = [_encode(value, state.encoding) for value in params]
        except (TypeError, ValueError, UnicodeEncodeError) as exc:
            raise RoundTripError(psycopg.DataError(str(exc)), []) from exc  # nothing was sent
        pgconn.enter_pipeline_mode()
        try:
            if begin:
                pgconn.send_query_params(b"BEGIN", None)
            pgconn.send_query_params(self._sql_bytes, encoded, None, None, _BINARY)
            pgconn.send_query_params(commit, None)
            pgconn.pipeline_sync()
            _flush(pgconn)
            began = _next_results(pgconn) if begin else None
            statement = _next_results(pgconn)
            committed = _next_results(pgconn)
            _next_results(pgconn)  # the sync
        finally:
            _leave_pipeline(conn)
        result = statement[-1] if statement else None
        if result is None or result.status != _TUPLES_OK:
            failed = began if begin and _status(began) != _COMMAND_OK else statement
            raise RoundTripError(_error(failed, conn), [])
        rows = self._rows(state, result)
        if _status(committed) != _COMMAND_OK:
            raise RoundTripError(_error(committed, conn), rows)
        return rows

    def _rows(self, state: _ConnectionState, result: pq.abc.PGresult) -> list[dict[str, Any]]:
        if result.nfields != len(self.columns):
            raise psycopg.DataError(
                f"the statement returned {result.nfields} columns, expected {len(self.columns)}"
            )
        tx = state.transformer
        # The same types as last time, unless a column's type changed (ALTER TABLE).
        types = tuple(result.ftype(i) for i in range(result.nfields))
        if types == state.column_types:
            tx.set_pgresult(result, set_loaders=False)
        else:
            tx.set_pgresult(result)
            state.column_types = types
        columns = self.columns
        try:
            return tx.load_rows(
                0, result.ntuples, lambda values: dict(zip(columns, values, strict=True))
            )
        finally:
            tx.set_pgresult(None, set_loaders=False)


def _encode(value: Any, encoding: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bool):  # before int: bool is an int
        return b"t" if value else b"f"
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, str):
        if "\x00" in value:
            # libpq would send a text parameter only up to its first NUL.
            raise ValueError("a text parameter cannot contain NUL characters")
        return value.encode(encoding)
    raise TypeError(f"unsupported parameter type {type(value).__name__}")


def _status(results: list[pq.abc.PGresult] | None) -> int | None:
    return results[-1].status if results else None


def _error(results: list[pq.abc.PGresult] | None, conn: psycopg.Connection) -> psycopg.Error:
    """The psycopg exception class for the failed result (by SQLSTATE), with the server's message."""
    result = results[-1] if results else None
    if result is None:
        return psycopg.OperationalError("the server sent no result")
    if result.status == pq.ExecStatus.PIPELINE_ABORTED:
        return psycopg.errors.PipelineAborted("pipeline aborted by an earlier error")
    encoding = conn.info.encoding
    message = (result.error_message or b"").decode(encoding, "replace").strip()
    sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
    cls: type[psycopg.Error] = psycopg.DatabaseError
    if sqlstate:
        try:
            cls = psycopg.errors.lookup(sqlstate.decode())
        except KeyError:
            pass
    return cls(message or f"statement failed with status {pq.ExecStatus(result.status).name}")


def _wait(pgconn: pq.abc.PGconn, events: int) -> None:
    poller = select.poll()
    poller.register(pgconn.socket, events)
    poller.poll()


def _flush(pgconn: pq.abc.PGconn) -> None:
    """Send everything queued (the connection is non-blocking: flush may need several turns)."""
    while pgconn.flush():
        _wait(pgconn, _READ_WRITE)
        pgconn.consume_input()  # a full send buffer may wait on the server reading ours


def _next_results(pgconn: pq.abc.PGconn) -> list[pq.abc.PGresult]:
    """The results of the next statement in the pipeline (or the lone sync result)."""
    results: list[pq.abc.PGresult] = []
    while True:
        while pgconn.is_busy():
            _wait(pgconn, _READ)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            return results
        results.append(result)
        if result.status == _PIPELINE_SYNC:
            return results


def _leave_pipeline(conn: psycopg.Connection) -> None:
    """Back to normal mode; a connection whose results could not all be read is closed."""
    pgconn = conn.pgconn
    if pgconn.status == _BAD:
        return
    try:
        pgconn.exit_pipeline_mode()
    except psycopg.Error:
        # Results are still pending (an exception interrupted the reads): no
        # later statement could be matched with its result, so the session
        # ends here and the pool replaces it. Its transaction rolls back.
        conn.close()
