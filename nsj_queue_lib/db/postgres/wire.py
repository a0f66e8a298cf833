"""The executor's hot path at the libpq level: a prepared statement and a commit in one round trip.

Every task sends the same statements (the claim function's call, then
``COMMIT AND CHAIN``). Through psycopg cursors and ``conn.pipeline()`` most
of a round trip's worker CPU goes to Python bookkeeping: a pipeline object,
cursors, query conversion, parameter dumpers and one loader per column of
every result. Here the statement is prepared once per connection, its
parameters are sent as text, and its rows are decoded with loaders set up
once (again only when the result's column types change).

Behind a pooler in transaction mode a prepared statement does not survive
its transaction (the next may run on another server connection, or after
``DISCARD ALL``): the first claim that finds it missing switches the
statement to libpq's unnamed statement, parsed with each execution, for
good (``PreparedRoundTrip``).

Only psycopg's public libpq wrapper (``psycopg.pq``) and ``psycopg.adapt.
Transformer`` are used. The connection is left as psycopg expects it: out of
pipeline mode, no result pending, or closed when that cannot be guaranteed.

A round trip is written once, as *steps*: a generator that yields the socket
events it must wait for (``POLLIN``/``POLLOUT`` masks) and returns its result.
``drive`` runs steps blocking (the executor threads); ``drive_async`` runs
them on an event loop (the async executor), so both send the very same
statements with the same error handling.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import secrets
import select
import weakref
from collections.abc import Generator, Sequence
from typing import Any, TypeVar

import psycopg
import psycopg.errors
from psycopg import pq
from psycopg.adapt import Transformer

from nsj_queue_lib.log import get_logger

logger = get_logger("wire")

TUPLES_OK = pq.ExecStatus.TUPLES_OK
COMMAND_OK = pq.ExecStatus.COMMAND_OK
_PIPELINE_SYNC = pq.ExecStatus.PIPELINE_SYNC
_BINARY = pq.Format.BINARY
_BAD = pq.ConnStatus.BAD
_BEGIN = (b"BEGIN",)
_BEGIN_UNFLUSHED = (b"BEGIN", b"SET LOCAL synchronous_commit = off")
_READ = select.POLLIN
_READ_WRITE = select.POLLIN | select.POLLOUT
# A reply of the pipeline: its results, None for a statement that was not sent.
_Results = list[pq.abc.PGresult] | None

T = TypeVar("T")
# A round trip's steps: yields the events to wait for on the connection's socket.
Steps = Generator[int, None, T]


def drive(conn: psycopg.Connection, steps: Steps[T]) -> T:
    """Run ``steps`` on ``conn``, blocking on its socket between them."""
    return _drive(conn.pgconn, steps)


def _drive(pgconn: pq.abc.PGconn, steps: Steps[T]) -> T:
    try:
        events = next(steps)
        while True:
            _wait(pgconn, events)
            events = steps.send(None)
    except StopIteration as done:
        return done.value
    finally:
        steps.close()


async def drive_async(conn: psycopg.Connection, steps: Steps[T]) -> T:
    """Run ``steps`` on ``conn`` from a coroutine: the event loop waits on the socket."""
    loop = asyncio.get_running_loop()
    fileno = conn.pgconn.socket
    try:
        events = next(steps)
        while True:
            await _readiness(loop, fileno, events)
            events = steps.send(None)
    except StopIteration as done:
        return done.value
    finally:
        steps.close()  # cancelled mid-way: the steps' own clean-up runs (see leave_pipeline)


async def _readiness(loop: asyncio.AbstractEventLoop, fileno: int, events: int) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fileno, wake)
    if events & select.POLLOUT:
        loop.add_writer(fileno, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fileno)
        if events & select.POLLOUT:
            loop.remove_writer(fileno)


def statement_steps(conn: psycopg.Connection, sql: bytes) -> Steps[None]:
    """One parameterless statement (transaction control) as steps; raises its psycopg error."""
    pgconn = conn.pgconn
    pgconn.send_query(sql)
    yield from flush(pgconn)
    results = yield from next_results(pgconn)
    if result_status(results) != COMMAND_OK:
        raise result_error(results, conn)


class RoundTripError(Exception):
    """The statement or the commit after it failed.

    ``error`` is the psycopg error; ``rows`` are the statement's rows when the
    statement itself succeeded and only the commit failed (its work undone).
    """

    def __init__(self, error: psycopg.Error, rows: list[dict[str, Any]]):
        super().__init__(str(error))
        self.error = error
        self.rows = rows


# A prepared statement that fails with these must be prepared anew: it was
# deallocated (a handler ran DISCARD ALL), or a column's type changed under it
# (ALTER TABLE: "cached plan must not change result type", "attribute N has
# wrong type") and every later execution in the session would fail the same
# way. The stale statement is left in the session: one per schema change.
REPREPARE = (
    psycopg.errors.InvalidSqlStatementName,
    psycopg.errors.FeatureNotSupported,
    psycopg.errors.DatatypeMismatch,
)


class _ConnectionState:
    __slots__ = ("name", "transformer", "column_types", "encoding")

    def __init__(self, conn: psycopg.Connection, name: bytes):
        self.name = name  # b"": the unnamed statement
        self.refresh(conn)

    def refresh(self, conn: psycopg.Connection) -> None:
        """Loaders (and the parameters' encoding) for the session's current client encoding."""
        self.transformer = Transformer(conn)
        self.column_types: tuple[int, ...] | None = None  # what the loaders were set up for
        self.encoding = conn.info.encoding


class PreparedRoundTrip:
    """One statement, prepared on each connection at its first use, plus a commit statement.

    ``columns`` name the statement's result columns in order; rows come back
    as dicts. Parameters are ints, strings or None, sent in text format.

    Pooler invariant: a named statement is used only where this session
    prepared it. A transaction opened by ``run(begin=True)`` that finds it
    missing (a pooler in transaction mode gave this transaction another server
    connection, or reset it with ``DISCARD ALL``) is rolled back (it did
    nothing) and run again at once with the unnamed statement, which every
    later ``run`` uses too (``unnamed``). Inside a transaction the server
    connection cannot change, so a statement a transaction's first round trip
    found stays valid until its commit. Names are unique to the process, so
    two clients sharing a server connection never collide.
    """

    def __init__(self, sql: str, columns: Sequence[str]):
        self.sql = sql
        self.columns = tuple(columns)
        digest = hashlib.sha256(sql.encode()).hexdigest()[:12]
        self._name_prefix = f"nsjq_{digest}_{secrets.token_hex(4)}_"
        self.unnamed = False
        self._preparations = itertools.count(1)
        self._sql_bytes = sql.encode()
        self._states: weakref.WeakKeyDictionary[psycopg.Connection, _ConnectionState] = (
            weakref.WeakKeyDictionary()
        )

    def forget(self, conn: psycopg.Connection) -> None:
        """Prepare the statement again on ``conn`` at its next use, under a new name.

        A new name, because the old one may still exist in the session: a
        plain re-PREPARE would fail, and libpq's Close for statements is recent.
        """
        self._states.pop(conn, None)

    def run(
        self,
        conn: psycopg.Connection,
        params: Sequence[Any],
        commit: bytes | None,
        begin: bool | Sequence[bytes] = False,
        unflushed: bool = False,
    ) -> list[dict[str, Any]]:
        """``steps`` run blocking."""
        return drive(conn, self.steps(conn, params, commit, begin, unflushed))

    def steps(
        self,
        conn: psycopg.Connection,
        params: Sequence[Any],
        commit: bytes | None,
        begin: bool | Sequence[bytes] = False,
        unflushed: bool = False,
    ) -> Steps[list[dict[str, Any]]]:
        """Execute the statement then ``commit`` (a transaction control statement) in one round
        trip; with ``begin``, in a transaction the same round trip opens (``begin`` may also
        be the statements that open it, BEGIN first). With ``unflushed``
        too, that transaction's commit does not wait for its WAL to reach the disk
        (``SET LOCAL synchronous_commit = off``; a transaction chained to it is synchronous
        again): its writes become durable with the session's next synchronous commit, which
        comes after them in the WAL, or are lost with a server crash before it.

        Raises ``RoundTripError`` when either fails, ``psycopg.OperationalError``
        when the connection broke.
        """
        state, fresh, encoded = self.encode(conn, params)
        opening: tuple[bytes, ...]
        if isinstance(begin, bool):
            opening = (_BEGIN_UNFLUSHED if unflushed else _BEGIN) if begin else ()
        else:  # the statements that open the transaction, as given (BEGIN first)
            opening = tuple(begin)
        replies = yield from self._round_trip(conn, state, fresh, encoded, opening, commit)
        began, prepared, statement, committed = replies
        if fresh and result_status(prepared) == COMMAND_OK:
            self.remember(conn, state)
        result = statement[-1] if statement else None
        if result is None or result.status != TUPLES_OK:
            if begin and result_status(began) != COMMAND_OK:
                failed = began
            elif fresh and result_status(prepared) != COMMAND_OK:
                failed = prepared
            else:
                failed = statement
            error = result_error(failed, conn)
            if begin and state.name and isinstance(error, psycopg.errors.InvalidSqlStatementName):
                self._go_unnamed(conn)
                return self.run(conn, params, commit, begin, unflushed)
            if isinstance(error, REPREPARE):
                self.forget(conn)
            raise RoundTripError(error, [])
        rows = self.rows_of(state, result)
        if commit is not None and result_status(committed) != COMMAND_OK:
            raise RoundTripError(result_error(committed, conn), rows)
        return rows

    def _round_trip(
        self,
        conn: psycopg.Connection,
        state: _ConnectionState,
        fresh: bool,
        encoded: list[bytes | None],
        opening: Sequence[bytes],
        commit: bytes | None,
    ) -> Steps[tuple[_Results, _Results, _Results, _Results]]:
        """Send ``opening``, the statement and ``commit`` in one pipeline; the replies to the
        opening (its first failure, or its last reply), the PREPARE, the statement and the
        commit (None for what was not sent)."""
        pgconn = conn.pgconn
        pgconn.enter_pipeline_mode()
        try:
            for sql in opening:
                pgconn.send_query_params(sql, None)
            self.send(pgconn, state, fresh, encoded)
            if commit is not None:  # None: the transaction stays open
                pgconn.send_query_params(commit, None)
            pgconn.pipeline_sync()
            yield from flush(pgconn)
            began = None  # the opening's first failure, or its last result
            for _sql in opening:
                reply = yield from next_results(pgconn)
                began = reply if began is None or result_status(began) == COMMAND_OK else began
            prepared = (yield from next_results(pgconn)) if fresh else None
            statement = yield from next_results(pgconn)
            committed = (yield from next_results(pgconn)) if commit is not None else None
            yield from next_results(pgconn)  # the sync
        finally:
            leave_pipeline(conn)
        return began, prepared, statement, committed

    def encode(
        self, conn: psycopg.Connection, params: Sequence[Any]
    ) -> tuple[_ConnectionState, bool, list[bytes | None]]:
        """The statement's state on ``conn``, whether it must be prepared there, and
        ``params`` encoded. Raises ``RoundTripError`` (nothing sent) when they cannot be."""
        state, fresh = self._state_for(conn)
        try:
            encoded = [_encode(value, state.encoding) for value in params]
        except (TypeError, ValueError, UnicodeEncodeError) as exc:
            raise RoundTripError(psycopg.DataError(str(exc)), []) from exc  # nothing was sent
        return state, fresh, encoded

    def send(
        self,
        pgconn: pq.abc.PGconn,
        state: _ConnectionState,
        fresh: bool,
        encoded: list[bytes | None],
    ) -> None:
        """Queue the statement in ``pgconn``'s pipeline (its PREPARE first when ``fresh``)."""
        if fresh:
            pgconn.send_prepare(state.name, self._sql_bytes)
        if state.name:
            pgconn.send_query_prepared(state.name, encoded, None, _BINARY)
        else:
            pgconn.send_query_params(self._sql_bytes, encoded, None, None, _BINARY)

    def remember(self, conn: psycopg.Connection, state: _ConnectionState) -> None:
        """The statement is prepared on ``conn`` as ``state`` says (its PREPARE succeeded)."""
        self._states[conn] = state

    def use_unnamed(self) -> None:
        """Send the statement unnamed from now on, on every connection (a pooler in
        transaction mode gives a transaction any server connection)."""
        self.unnamed = True
        self._states.clear()

    def _state_for(self, conn: psycopg.Connection) -> tuple[_ConnectionState, bool]:
        """The connection's statement state, and whether the statement must be prepared."""
        known = self._states.get(conn)
        if known is not None:
            if known.encoding != conn.info.encoding:
                # A handler changed client_encoding: text now arrives in the new one.
                known.refresh(conn)
            return known, False
        name = "" if self.unnamed else f"{self._name_prefix}{next(self._preparations)}"
        state = _ConnectionState(conn, name.encode())
        if self.unnamed:
            self._states[conn] = state
        return state, not self.unnamed

    def _go_unnamed(self, conn: psycopg.Connection) -> None:
        """The statement this session prepared is gone between two transactions: from now on
        send it unnamed. The transaction the failed round trip opened is rolled back, through
        libpq: a caller may hold psycopg's lock of the connection (single_insert.py)."""
        if not self.unnamed:
            logger.info(
                "prepared statements do not outlive a transaction on this connection (a pooler "
                "in transaction mode, or DISCARD ALL); the statement is parsed with each call "
                "from now"
            )
        self.use_unnamed()
        drive(conn, statement_steps(conn, b"ROLLBACK"))

    def rows_of(self, state: _ConnectionState, result: pq.abc.PGresult) -> list[dict[str, Any]]:
        """The rows of the statement's ``result`` as dicts of ``columns``."""
        if result.nfields != len(self.columns):
            raise psycopg.DataError(
                f"statement {state.name.decode() or '(unnamed)'} returned {result.nfields} "
                f"columns, expected {len(self.columns)}"
            )
        tx = state.transformer
        # A prepared statement's result types cannot change; an unnamed one's can (ALTER TABLE).
        types = (
            state.column_types
            if state.name and state.column_types is not None
            else tuple(result.ftype(i) for i in range(result.nfields))
        )
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


def result_status(results: list[pq.abc.PGresult] | None) -> int | None:
    return results[-1].status if results else None


def result_error(results: list[pq.abc.PGresult] | None, conn: psycopg.Connection) -> psycopg.Error:
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


def flush(pgconn: pq.abc.PGconn) -> Steps[None]:
    """Send everything queued (the connection is non-blocking: flush may need several turns)."""
    while pgconn.flush():
        yield _READ_WRITE
        pgconn.consume_input()  # a full send buffer may wait on the server reading ours


def next_results(pgconn: pq.abc.PGconn) -> Steps[list[pq.abc.PGresult]]:
    """The results of the next statement in the pipeline (or the lone sync result), or, out
    of pipeline mode, of the statement sent."""
    results: list[pq.abc.PGresult] = []
    while True:
        while pgconn.is_busy():
            yield _READ
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            return results
        results.append(result)
        if result.status == _PIPELINE_SYNC:
            return results


def leave_pipeline(conn: psycopg.Connection) -> None:
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
