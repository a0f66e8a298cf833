"""Group commit on PostgreSQL.

Per task, at most one short round trip: the savepoint the next handler rolls
back to (``SAVEPOINT``, sent through libpq directly: no parameters, no rows),
and only when the handler uses ``bd_conn``: it is sent right before the
handler's first statement (first_use.py); a handler that sends none has
nothing to roll back and costs no round trip at all. The group's successes
are written in one statement at its end ('sucesso' and the liveness locks'
release for all of them), then the claim function claims the next group and
``COMMIT AND CHAIN`` commits both, in one round trip: a group costs two round
trips and one commit on top of its tasks.

Because the successes are written only at the end, a handler that commits or
rolls back ``bd_conn`` would leave the group unable to tell whether the
earlier tasks' writes were kept. The group's transaction id, taken with its
first savepoint, answers it (``pg_xact_status``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import pq

from nsj_queue_lib.db import first_use as shared_first_use
from nsj_queue_lib.db.dialect import settle_routine_name
from nsj_queue_lib.db.group_ops import SAVEPOINT, GroupState
from nsj_queue_lib.db.postgres import first_use, group_wire
from nsj_queue_lib.db.postgres.errors import wrap_driver_errors
from nsj_queue_lib.db.postgres.store import PostgresQueueStore
from nsj_queue_lib.db.postgres.wire import RoundTripError
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.model import Claim, TaskRecord

_SAVEPOINT = f"SAVEPOINT {SAVEPOINT}".encode()
# The first savepoint of a transaction also names the transaction (assigning its id).
_FIRST_SAVEPOINT = _SAVEPOINT + b"; SELECT pg_current_xact_id()::text"
_ROLLBACK_TO = f"ROLLBACK TO SAVEPOINT {SAVEPOINT}".encode()
_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)


class PostgresGroupOps:
    def __init__(self, store: PostgresQueueStore):
        self.store = store
        # The settle function db_gen creates next to the claim function (claim_function.sql).
        settle_function = settle_routine_name(store.queue_table) or "settle_routine_unavailable"
        self._settle = group_wire.settle_statement(settle_function)

    def claim_batch(self, conn: Any, limit: int) -> list[Claim]:
        # Whatever an earlier drain left armed (an unexpected error) goes.
        shared_first_use.disarm(conn)
        rows = self.store.claim_call(conn, None, None, limit, b"COMMIT AND CHAIN", begin=True)
        return self._claims(conn, rows)

    def succeeded(self, conn: Any, task: TaskRecord, mensagem: str) -> None:
        shared_first_use.disarm(conn)  # written with the group's commit

    def savepoint(self, conn: Any, group: GroupState) -> None:
        # _set_savepoint talks to libpq directly, as the hook must (psycopg's lock is held).
        # Should it fail, the handler's statement goes on (the connection says FAILED); if
        # the handler fails too, rollback_to_savepoint raises.
        shared_first_use.arm_savepoint(
            conn, lambda: self._set_savepoint(conn, group), first_use.hook_fires
        )

    def _set_savepoint(self, conn: Any, group: GroupState) -> None:
        if group.tx is None:
            group.tx = self._exec(conn, _FIRST_SAVEPOINT, "savepoint")
        else:
            self._exec(conn, _SAVEPOINT, "savepoint")

    def rollback_to_savepoint(self, conn: Any) -> None:
        if shared_first_use.savepoint_to_roll_back(conn):
            self._exec(conn, _ROLLBACK_TO, "rollback to savepoint")

    def commit(
        self,
        conn: Any,
        written: Sequence[tuple[TaskRecord, str]],
        claim_limit: int,
        chain: bool = False,
        group: GroupState | None = None,
    ) -> list[Claim]:
        shared_first_use.disarm(conn)
        # AND CHAIN when the group goes on: idle between a COMMIT and a BEGIN, the session
        # could be handed to another client by a transaction pooler with the group's
        # liveness locks (docs/how-to/poolers.md).
        commit = b"COMMIT AND CHAIN" if claim_limit or chain else b"COMMIT"
        if len(written) == 1:  # the claim function settles one task itself: one round trip
            [(task, mensagem)] = written
            rows = self.store.claim_call(conn, task.id, mensagem, claim_limit, commit)
            return self._claims(conn, rows) if claim_limit else []
        if not written:
            rows = self.store.claim_call(conn, None, None, claim_limit, commit)
            return self._claims(conn, rows) if claim_limit else []
        store = self.store
        if store.claim_statement.unnamed and not self._settle.unnamed:
            # The claim found its prepared statement gone in a new transaction (a pooler in
            # transaction mode): so would this one be, prepared on another server connection.
            self._settle.use_unnamed()
        claim = store.claim_params(None, None, claim_limit)
        with wrap_driver_errors("complete_tasks"):
            try:
                _, rows = group_wire.run(
                    conn,
                    [
                        (self._settle, group_wire.settle_params(written, store.queue_key)),
                        (store.claim_statement, claim),
                    ],
                    commit,
                )
            except RoundTripError as exc:
                store.unlock_uncommitted_claim(conn, exc.rows)
                raise exc.error from None
        return self._claims(conn, rows) if claim_limit else []

    def transaction_committed(self, conn: Any, group: GroupState) -> bool | None:
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
