"""The task session on PostgreSQL: one task at a time, or a commit group.

One task at a time, the session is ``TaskSession``'s over the store's claim
function (one round trip completes a task, claims the next and commits).

A commit group costs, per task, at most one short round trip: the savepoint
the next handler rolls back to (``SAVEPOINT``, sent through libpq directly: no
parameters, no rows), and only when the handler uses ``bd_conn``: it is sent
right before the handler's first statement (first_use.py); a handler that
sends none has nothing to roll back and costs no round trip at all. The
group's end is one round trip of three pipelined statements (wire.py's
prepared statements, so neither is parsed and planned again):

1. the settle function: every success of the group 'sucesso' with its
   ``mensagem``, then the liveness locks of all of them released; an error
   (the fence) when one of them is no longer 'processando', which aborts the
   claim and the commit after it;
2. the claim function, claiming the next group (``claim_limit`` 0: none);
3. ``COMMIT AND CHAIN`` (or ``COMMIT``).

A group with one success ends in one statement: the claim function settles
one task itself. A failure of any of them leaves nothing of the group
committed.

Because the successes are written only at the end, a handler that commits or
rolls back ``bd_conn`` would leave the group unable to tell whether the
earlier tasks' writes were kept. The group's transaction id, taken with its
first savepoint, answers it (``pg_xact_status``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import psycopg
from psycopg import pq

from nsj_queue_lib.db import first_use as shared_first_use
from nsj_queue_lib.db.postgres import first_use
from nsj_queue_lib.db.postgres.errors import wrap_driver_errors
from nsj_queue_lib.db.postgres.store import PostgresQueueStore
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
from nsj_queue_lib.db.process_store import ProcessStore
from nsj_queue_lib.db.task_session import SAVEPOINT, GroupState, Locks, TaskSession
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.model import Claim, TaskRecord

_SAVEPOINT = f"SAVEPOINT {SAVEPOINT}".encode()
# The first savepoint of a transaction also names the transaction (assigning its id).
_FIRST_SAVEPOINT = _SAVEPOINT + b"; SELECT pg_current_xact_id()::text"
_ROLLBACK_TO = f"ROLLBACK TO SAVEPOINT {SAVEPOINT}".encode()
_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)


# A transaction-local setting (a prepared statement: SET cannot be one).
INDEX_ONLY_SQL = "SELECT set_config('enable_seqscan', 'off', true)"


class PostgresTaskSession(TaskSession):
    groups: ClassVar[bool] = True
    process_batches: ClassVar[bool] = True

    def __init__(self, store: PostgresQueueStore, locks: Locks):
        super().__init__(store, locks)
        self.store: PostgresQueueStore = store
        self._settle = settle_statement(store.settle_function)
        self._process_saves: PreparedRoundTrip | None = None  # built at a process's first save
        self._index_only: PreparedRoundTrip | None = None  # and this, sent before it

    def claim_group(self, conn: Any, limit: int) -> list[Claim]:
        # Whatever an earlier drain left armed (an unexpected error) goes.
        shared_first_use.disarm(conn)
        rows = self.store.claim_call(conn, None, None, limit, b"COMMIT AND CHAIN", begin=True)
        return self._claims(conn, rows)

    def succeeded(self, conn: Any, task: TaskRecord, mensagem: str) -> None:
        shared_first_use.disarm(conn)  # written with the group's commit

    def before_next_handler(self, conn: Any, group: GroupState) -> None:
        # _set_savepoint talks to libpq directly, as the hook must (psycopg's lock is held).
        # Should it fail, the handler's statement goes on (the connection says FAILED); if
        # the handler fails too, undo_handler raises.
        shared_first_use.arm_savepoint(
            conn, lambda: self._set_savepoint(conn, group), first_use.hook_fires
        )

    def _set_savepoint(self, conn: Any, group: GroupState) -> None:
        if group.tx is None:
            group.tx = self._exec(conn, _FIRST_SAVEPOINT, "savepoint")
        else:
            self._exec(conn, _SAVEPOINT, "savepoint")

    def undo_handler(self, conn: Any) -> None:
        if shared_first_use.savepoint_to_roll_back(conn):
            self._exec(conn, _ROLLBACK_TO, "rollback to savepoint")

    def _end_group(
        self, conn: Any, group: GroupState, claim_limit: int, go_on: bool
    ) -> list[Claim]:
        written = group.written
        shared_first_use.disarm(conn)
        # AND CHAIN when the group goes on: idle between a COMMIT and a BEGIN, the session
        # could be handed to another client by a transaction pooler with the group's
        # liveness locks (docs/how-to/poolers.md).
        commit = b"COMMIT AND CHAIN" if claim_limit or go_on else b"COMMIT"
        saves = self._take_saves(group)
        if len(written) == 1 and not saves:  # the claim function settles one task: one round trip
            [(task, mensagem)] = written
            rows = self.store.claim_call(conn, task.id, mensagem, claim_limit, commit)
            return self._claims(conn, rows) if claim_limit else []
        if not written:
            rows = self.store.claim_call(conn, None, None, claim_limit, commit)
            return self._claims(conn, rows) if claim_limit else []
        store = self.store
        self._follow_pooler()
        statements: list[tuple[PreparedRoundTrip, Sequence[Any]]]
        if len(written) == 1:  # the claim function settles it, after its process's write
            [(task, mensagem)] = written
            statements = [
                (store.claim_statement, store.claim_params(task.id, mensagem, claim_limit))
            ]
        else:
            claim = store.claim_params(None, None, claim_limit)
            statements = [
                (self._settle, settle_params(written, store.queue_key)),
                (store.claim_statement, claim),
            ]
        # The process tasks' writes, before their successes (process/batch.py).
        statements[:0] = self._save_statements(saves)
        with wrap_driver_errors("complete_tasks"):
            try:
                *_, rows = run(conn, statements, commit)
            except RoundTripError as exc:
                store.unlock_uncommitted_claim(conn, exc.rows)
                raise exc.error from None
        return self._claims(conn, rows) if claim_limit else []

    def _take_saves(self, group: GroupState) -> list[Any]:
        """The writes the group's process tasks left for its commit (process/batch.py)."""
        if group.processes is None:
            return []
        return list(group.processes.take_saves([task.id for task, _ in group.written]))

    def _save_statements(self, saves: list[Any]) -> list[tuple[PreparedRoundTrip, Sequence[Any]]]:
        """The statements that write ``saves`` (none without any), index only."""
        if not saves:
            return []
        return [
            (self._by_index(), ()),
            (self._save_processes(), save_processes_params(saves)),
        ]

    def _own_statements(self) -> tuple[PreparedRoundTrip | None, ...]:
        """The session's prepared statements besides the settle (None: not built yet)."""
        return (self._process_saves, self._index_only)

    def _follow_pooler(self) -> None:
        """The claim found its prepared statement gone in a new transaction (a pooler in
        transaction mode): so would the session's own be, prepared on another server
        connection; they are sent unnamed from then on."""
        if self.store.claim_statement.unnamed and not self._settle.unnamed:
            self._settle.use_unnamed()
            for statement in self._own_statements():
                if statement is not None:
                    statement.use_unnamed()

    def _by_index(self) -> PreparedRoundTrip:
        """No sequential scans until this transaction's commit (the settle's round trip ends
        it). The process save joins a group's few rows to the process tables by their keys,
        and the planner, costing a random page at 4 sequential ones, read both tables whole
        for them while they held a few thousand rows (every row at every group's settle)."""
        if self._index_only is None:
            self._index_only = PreparedRoundTrip(INDEX_ONLY_SQL, ("set_config",))
            if self._settle.unnamed:
                self._index_only.use_unnamed()
        return self._index_only

    def _save_processes(self) -> PreparedRoundTrip:
        if self._process_saves is None:
            store = ProcessStore.for_store(self.store, self.store.queue_table)
            self._process_saves = PreparedRoundTrip(store.sql["save_processes"], ("saved",))
            if self._settle.unnamed:
                self._process_saves.use_unnamed()
        return self._process_saves

    def _transaction_committed(self, conn: Any, group: GroupState) -> bool | None:
        shared_first_use.disarm(conn)
        if group.tx is None:
            return None
        with wrap_driver_errors("transaction status"):
            row = conn.execute("SELECT pg_xact_status(%s::xid8)", (group.tx,)).fetchone()
        return row is not None and row[0] == "committed"

    def _exec(self, conn: Any, sql: bytes, what: str) -> str | None:
        """A parameterless statement through libpq (no cursor); the last result's first
        value, if it has rows."""
        try:
            result = conn.pgconn.exec_(sql)
        except psycopg.Error as exc:
            raise DatabaseError(f"{what} failed: {exc}") from exc
        if result.status not in _OK:
            message = (result.error_message or b"").decode("utf-8", "replace").strip()
            raise DatabaseError(f"{what} failed: {message}")
        if result.status == pq.ExecStatus.TUPLES_OK and result.ntuples:
            value = result.get_value(0, 0)
            return None if value is None else bytes(value).decode()
        return None

    def _claims(self, conn: Any, rows: list[dict[str, Any]]) -> list[Claim]:
        if not rows:
            self.store.rollback(conn)  # the empty transaction opened for the next group
            return []
        claims = []
        for row in rows:
            locked = bool(row.pop("liveness_locked"))
            claims.append(Claim(TaskRecord.from_row(row), locked))
        return claims


# -- the group's end in one round trip --


def settle_sql(settle_function: str) -> str:
    """The settling statement: $1 the tasks' ids (bigint[]), $2 their messages (text[], in the
    same order), $3 the queue's lock key. One row: the rows settled. The settle function
    (claim_function.sql) raises NQ001 when a task is no longer 'processando' (the fence)."""
    return f"SELECT {settle_function}($1::bigint[], $2::text[], $3::int4) AS settled"


def settle_statement(settle_function: str) -> PreparedRoundTrip:
    return PreparedRoundTrip(settle_sql(settle_function), ("settled",))


def settle_params(written: Sequence[tuple[Any, str]], queue_key: int) -> tuple[str, str, int]:
    """The settling statement's parameters for ``written`` (tasks with their mensagem)."""
    ids = "{" + ",".join(str(int(task.id)) for task, _ in written) + "}"
    return ids, nullable_array(mensagem for _, mensagem in written), queue_key


def save_processes_params(saves: Sequence[Sequence[Any]]) -> list[str]:
    """processes.sql's save_processes parameters: one array literal per column of ``saves``
    (process/batch.py's ProcessSave tuples), NULL where a value is None."""
    return [nullable_array(column) for column in zip(*saves, strict=True)]


def nullable_array(values: Iterable[Any]) -> str:
    """``values`` as a PostgreSQL array literal, in order: None as NULL, a bool as t or f."""

    def element(value: Any) -> str:
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            return "t" if value else "f"
        text = str(value)
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return "{" + ",".join(element(v) for v in values) + "}"


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
    check_statements(conn, sending, replies)
    rows = [
        statement.rows_of(state, result[-1])
        for (statement, state, _fresh, _encoded), (_prepared, result) in zip(
            sending, replies, strict=True
        )
    ]
    if result_status(committed) != COMMAND_OK:
        raise RoundTripError(result_error(committed, conn), rows[-1])
    return rows


def check_statements(conn: Any, sending: list[Any], replies: list[Any]) -> None:
    """Raise ``RoundTripError`` for the first of ``sending``'s statements that failed; those
    prepared anew are remembered (or forgotten) as wire.py's round trips do."""
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
