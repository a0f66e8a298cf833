"""One write per task (QUEUE_ONE_WRITE): the commit group's session on PostgreSQL that holds
its tasks instead of writing them 'processando' (docs/internals/one-write.md).

A group's transaction begins with its claim, which locks its rows and leaves them
'pendente' (a *held* claim, claim_query.sql: asked for by ``SET LOCAL nsjq.hold``).
The handlers run in that transaction, and its end writes their outcomes, the only
write of each task, then commits; the next group's claim follows the commit in the
same round trip, in the transaction ``COMMIT AND CHAIN`` opens. So:

- while a task runs, its row is locked by the group: no other claim takes it, and a
  settle meets no stranger's row (the fence accepts 'pendente' only in a held
  transaction);
- a held task that needs more than its outcome written first becomes 'processando'
  in its transaction (held_groups.sql ``write_held``): a failure's record, a durable
  step's or wait's fence, and every held task that goes on after a commit in the
  middle of the group (a step's checkpoint, a group open QUEUE_BATCH_MAX_MS);
- a claim that also took a task it had to write (a lock key's, or one with a timeout
  of its own) writes the held ones too and commits at once: that group is a two-write
  group, so that the key's running entry is not left uncommitted for the group's life;
- each held group writes a row on the ledger (held_groups.py) before its first
  handler and deletes it with its commit: a worker that dies mid-group leaves it, and
  the retry service counts those tasks' attempt.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from nsj_queue_lib.db import first_use as shared_first_use
from nsj_queue_lib.db.dialect import groups_table_name
from nsj_queue_lib.db.postgres.errors import wrap_driver_errors
from nsj_queue_lib.db.postgres.held_groups import (
    Ledger,
    end_statement,
    held_group_sql,
    int_array,
    write_statement,
)
from nsj_queue_lib.db.postgres.session import (
    PostgresTaskSession,
    check_statements,
    settle_params,
)
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
from nsj_queue_lib.db.task_session import RELEASED, FailureRecord, GroupState, Locks
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import PENDENTE, PROCESSANDO, Claim, TaskRecord

logger = get_logger("group_commit")

_HOLD = b"SET LOCAL nsjq.hold = 'on'"
_OPEN_HELD = (b"BEGIN", _HOLD)


class _Held:
    """What the open transaction of a connection holds: its held tasks not yet written, those
    it gave back unwritten (locked until its end), and the group's ledger row."""

    __slots__ = ("ids", "freed", "row")

    def __init__(self, ids: set[int], row: str):
        self.ids = ids
        self.freed: set[int] = set()
        self.row = row


class HeldTaskSession(PostgresTaskSession):
    def __init__(self, store: PostgresQueueStore, locks: Locks, ledger: Ledger):
        super().__init__(store, locks)
        self.ledger = ledger
        # Built at first use (the layout is known by then).
        self._end: PreparedRoundTrip | None = None
        self._write_held: PreparedRoundTrip | None = None
        self._held_sql: dict[str, str] | None = None
        self._held: dict[int, _Held] = {}  # by id(conn): one group per connection at a time
        self._has_table: bool | None = None
        self._dropped: dict[int, set[int]] = {}  # by id(conn): held by a rolled-back transaction

    def _own_statements(self) -> tuple[PreparedRoundTrip | None, ...]:
        return (*super()._own_statements(), self._end, self._write_held)

    def _sql(self) -> dict[str, str]:
        """held_groups.sql for this queue (rendered at first use: the layout is known)."""
        if self._held_sql is None:
            self._held_sql = held_group_sql(self.store.queue_table, self.store.partitioned)
        return self._held_sql

    def _statements(self) -> tuple[PreparedRoundTrip, PreparedRoundTrip]:
        """The group row's delete and the held tasks' write (held_groups.sql)."""
        if self._end is None or self._write_held is None:
            sql = self._sql()
            self._end, self._write_held = end_statement(sql), write_statement(sql)
            if self._settle.unnamed:
                self._end.use_unnamed()
                self._write_held.use_unnamed()
        return self._end, self._write_held

    def _writes(self, ids: Sequence[int]) -> list[tuple[PreparedRoundTrip, Sequence[Any]]]:
        """The statements that write held tasks ``ids`` 'processando' (by their index)."""
        return [(self._by_index(), ()), (self._statements()[1], (int_array(ids),))]

    # -- the claim --

    def claim_group(self, conn: Any, limit: int) -> list[Claim]:
        if not self._usable(conn):
            return super().claim_group(conn, limit)
        shared_first_use.disarm(conn)
        rows = self.store.claim_call(conn, None, None, limit, None, begin=_OPEN_HELD)
        return self._held_claims(conn, rows)

    def _usable(self, conn: Any) -> bool:
        """Whether the queue has its groups table; without it (db_gen --upgrade not run) the
        session claims as PostgresTaskSession does, said once."""
        if self._has_table is None:
            table = groups_table_name(self.store.queue_table)
            with wrap_driver_errors("groups table"):
                row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
                conn.rollback()
            self._has_table = bool(row and row[0])
            if not self._has_table:
                logger.error(
                    "queue=%s: QUEUE_ONE_WRITE needs the table %s (db_gen --upgrade); "
                    "claiming with two writes meanwhile",
                    self._queue,
                    table,
                )
        return self._has_table

    def _held_claims(self, conn: Any, rows: list[dict[str, Any]]) -> list[Claim]:
        self._dropped.pop(id(conn), None)
        claims = self._claims(conn, rows)
        held = [claim.task for claim in claims if claim.task.row.get("status") == PENDENTE]
        if not held:
            return claims
        row: str | None = None
        if len(held) == len(claims):
            try:
                row = self.ledger.open([task.id for task in held])
            except DatabaseError as exc:
                logger.warning("queue=%s: %s; the group writes its tasks", self._queue, exc)
        if row is None:
            # Written and committed now: a task whose key's running entry must not stay
            # uncommitted for the group's life came with them, or the ledger failed.
            self._write(conn, held, b"COMMIT AND CHAIN")
            return claims
        self._held[id(conn)] = _Held({task.id for task in held}, row)
        return claims

    @property
    def _queue(self) -> str:
        return self.store.queue_table

    def _write(self, conn: Any, tasks: Sequence[TaskRecord], commit: bytes | None) -> None:
        """``tasks`` (held by this transaction) written 'processando', then ``commit``."""
        with wrap_driver_errors("write held tasks"):
            try:
                run_in_transaction(conn, self._writes([task.id for task in tasks]), commit)
            except RoundTripError as exc:
                raise exc.error from None
        for task in tasks:
            task.row["status"] = PROCESSANDO

    def close(self) -> None:
        self.ledger.close()

    def holds_rows(self, conn: Any) -> bool:
        return id(conn) in self._held

    def write_held(self, conn: Any) -> None:
        """Every held task of the transaction written 'processando' (a durable step or wait
        commits in the middle of the group: they go on after it)."""
        held = self._held.get(id(conn))
        if held is not None and held.ids:
            self._write_ids(conn, held, list(held.ids))

    def _write_ids(self, conn: Any, held: _Held, ids: list[int]) -> None:
        with wrap_driver_errors("write held tasks"):
            try:
                run_in_transaction(conn, self._writes(ids), None)
            except RoundTripError as exc:
                raise exc.error from None
        held.ids.difference_update(ids)

    # -- what needs a held task written first --

    def record_failure(self, conn: Any, task: TaskRecord, record: FailureRecord) -> None:
        held = self._held.get(id(conn))
        if held is not None and task.id in held.ids:
            self._write_ids(conn, held, [task.id])
        elif task.id in self._dropped.pop(id(conn), ()):
            # Its held transaction was rolled back whole (no savepoint could be set): the
            # row is free. Written 'processando' unless another claim took it meanwhile
            # (that attempt runs it; this one's failure is not recorded).
            params = {"ids": [task.id], "started_at": None, "worker": None}
            with wrap_driver_errors("write held tasks"):
                if not conn.execute(self._sql()["write_abandoned"], params).fetchone()[0]:
                    return
        super().record_failure(conn, task, record)

    def give_back_claimed(self, conn: Any, task: TaskRecord, cancel_mensagem: str) -> str:
        held = self._held.get(id(conn))
        if held is not None and task.id in held.ids:
            # Never written: 'pendente' already, free at the group's commit. A cancel waits
            # for the row (cancel_task), so none can have been asked for meanwhile.
            held.ids.discard(task.id)
            held.freed.add(task.id)
            self.locks.unlock_in_transaction(conn, task)
            return RELEASED
        return super().give_back_claimed(conn, task, cancel_mensagem)

    # -- the transaction lost --

    def group_ended(self, conn: Any, group: GroupState) -> bool | None:
        committed = super().group_ended(conn, group)
        self.drop_held(conn, group)
        return committed

    def drop_held(self, conn: Any, group: GroupState | None = None) -> None:
        """The transaction is gone (rolled back, or ended by a handler): its held tasks are
        free for any claim, so the unstarted ones leave ``group`` (their liveness locks
        released): the group must not run them. The ledger row stays: the retry service
        counts an attempt for each of its tasks still free when it looks (those that ran
        here lost their outcome with the transaction)."""
        held = self._held.pop(id(conn), None)
        if held is None or group is None:
            return
        self._dropped[id(conn)] = set(held.ids)  # a failure recorded next (record_failure)
        waiting = group.waiting
        gone = held.ids | held.freed
        freed = [claim for claim in waiting if claim.task.id in gone]
        if freed:
            group.waiting = collections.deque(c for c in waiting if c.task.id not in gone)
            for claim in freed:
                try:
                    self.locks.unlock_in_transaction(conn, claim.task)
                except DatabaseError:
                    pass  # a broken connection: its locks went with it

    # -- the group's end --

    def _end_group(
        self, conn: Any, group: GroupState, claim_limit: int, go_on: bool
    ) -> list[Claim]:
        if not self._has_table:  # no groups table: two writes (_usable)
            return super()._end_group(conn, group, claim_limit, go_on)
        written = group.written
        shared_first_use.disarm(conn)
        held = self._held.pop(id(conn), None)
        self._follow_pooler()
        statements = self._save_statements(self._take_saves(group))
        if written:
            statements.append((self._settle, settle_params(written, self.store.queue_key)))
        if held is not None:
            try:
                self.ledger.confirm()
            except DatabaseError as exc:  # its row may be missing: the rescue would not count
                logger.warning("queue=%s: %s", self._queue, exc)
            done = {task.id for task, _ in written}
            going_on = [i for i in held.ids if i not in done]
            if going_on:  # they go on after the commit, as two-write tasks
                statements += self._writes(going_on)
            statements.append((self._statements()[0], (held.row,)))
        commit = b"COMMIT AND CHAIN" if claim_limit or go_on else b"COMMIT"
        with wrap_driver_errors("complete_tasks"):
            try:
                rows = drive(conn, _then_claim(conn, statements, commit, self._claim(claim_limit)))
            except RoundTripError as exc:
                if held is not None:
                    self._held[id(conn)] = held  # rolled back: drop_held sees to it
                self.store.unlock_uncommitted_claim(conn, exc.rows)
                raise exc.error from None
        if rows is None:  # committed; the next claim failed (logged)
            self.store.rollback(conn)
            return []
        return self._held_claims(conn, rows) if claim_limit else []

    def _claim(self, claim_limit: int) -> tuple[PreparedRoundTrip, Sequence[Any]] | None:
        if not claim_limit:
            return None
        store = self.store
        return store.claim_statement, store.claim_params(None, None, claim_limit)


def run_in_transaction(
    conn: Any, statements: Sequence[tuple[PreparedRoundTrip, Sequence[Any]]], commit: bytes | None
) -> None:
    """``statements`` then ``commit`` (None: none, the transaction goes on) in one round trip.
    Raises ``RoundTripError``."""
    drive(conn, _then_claim(conn, statements, commit, None))


def _then_claim(
    conn: Any,
    statements: Sequence[tuple[PreparedRoundTrip, Sequence[Any]]],
    commit: bytes | None,
    claim: tuple[PreparedRoundTrip, Sequence[Any]] | None,
) -> Steps[list[dict[str, Any]] | None]:
    """``statements``, ``commit`` (None: none), then (in the transaction it chains) a held
    claim, in one round trip: the claim's rows ([] without a claim). RoundTripError when a
    statement or the commit failed; None when only the claim did (the commit stands)."""
    sending = [(statement, *statement.encode(conn, params)) for statement, params in statements]
    claiming = None if claim is None else (claim[0], *claim[0].encode(conn, claim[1]))
    pgconn = conn.pgconn
    pgconn.enter_pipeline_mode()
    replies = []
    held = prepared = claimed = None
    try:
        for statement, state, fresh, encoded in sending:
            statement.send(pgconn, state, fresh, encoded)
        if commit is not None:
            pgconn.send_query_params(commit, None)
        if claiming is not None:
            pgconn.send_query_params(_HOLD, None)
            claiming[0].send(pgconn, *claiming[1:])
        pgconn.pipeline_sync()
        yield from flush(pgconn)
        for _statement, _state, fresh, _encoded in sending:
            prepared = (yield from next_results(pgconn)) if fresh else None
            replies.append((prepared, (yield from next_results(pgconn))))
        committed = (yield from next_results(pgconn)) if commit is not None else None
        if claiming is not None:
            held = yield from next_results(pgconn)
            prepared = (yield from next_results(pgconn)) if claiming[2] else None
            claimed = yield from next_results(pgconn)
        yield from next_results(pgconn)  # the sync
    finally:
        leave_pipeline(conn)
    check_statements(conn, sending, replies)
    if commit is not None and result_status(committed) != COMMAND_OK:
        raise RoundTripError(result_error(committed, conn), [])
    if claiming is None:
        return []
    statement, state, fresh, _encoded = claiming
    if fresh and result_status(prepared) == COMMAND_OK:
        statement.remember(conn, state)
    last = claimed[-1] if claimed else None
    if result_status(held) != COMMAND_OK or last is None or last.status != TUPLES_OK:
        failed = held if result_status(held) != COMMAND_OK else claimed
        error = result_error(failed, conn)
        if isinstance(error, REPREPARE):
            statement.forget(conn)
        logger.warning("the claim after a group's commit failed: %s", error)
        return None
    return statement.rows_of(state, last)
