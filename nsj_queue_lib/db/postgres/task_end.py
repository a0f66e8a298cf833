"""``wait_for_task``'s push on PostgreSQL: LISTEN for a task's end on the caller's connection.

The queue's end trigger (``end_trigger.sql``) sends a NOTIFY on ``<queue>_end`` at the
commit that ends a task, but only while someone holds the shared advisory lock
(``task_end_lock_key(queue)``, the task's id) that says it waits: ``register`` takes that
lock and LISTENs, in one round trip with the first look (a pipeline); ``close`` lets both
go. Notifications reach a
session only between its transactions, so the waiter's connection must be idle: one in
a transaction (``TaskEndWaiter.on`` returns None) polls instead, as a queue without the
trigger does (``register`` says False: an older schema, the partitioned layout).

Looks run on the same connection: on a connection that is not autocommit each look's
transaction is ended (``end_look``), else no notification would be delivered.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import pq, sql

from nsj_queue_lib.db.dialect import task_end_channel, task_end_lock_key
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.identifiers import split_table_name

_END_TRIGGER = "trigger_end_{}"
# Whether this session now says it waits for the task, and whether the queue has the end
# trigger that hears it (an older schema, or the partitioned layout, has none).
_REGISTER = (
    "SELECT pg_try_advisory_lock_shared(%(key)s, %(task_key)s), "
    "EXISTS (SELECT 1 FROM pg_catalog.pg_trigger "
    "WHERE tgrelid = to_regclass(%(table)s) AND tgname = %(trigger)s AND tgenabled <> 'D')"
)


class TaskEndWaiter:
    """One wait for one task's end on ``conn``, an idle psycopg 3 connection."""

    def __init__(
        self, conn: psycopg.Connection[Any], queue_table: str, look: tuple[str, dict[str, Any]]
    ) -> None:
        _, table = split_table_name(queue_table)
        self._conn = conn
        self._look = look
        self._table = queue_table
        self._trigger = _END_TRIGGER.format(table)
        self._channel = task_end_channel(table)
        self._key = task_end_lock_key(table)
        self._task_key: int | None = None
        self._first_id: int | None = None
        self._listening = False

    @classmethod
    def on(
        cls, conn: Any, queue_table: str, look: tuple[str, dict[str, Any]]
    ) -> TaskEndWaiter | None:
        """A waiter on ``conn`` whose looks run ``look`` (the task's ``task_view`` statement
        and its parameters); None where it cannot hear a NOTIFY: not a psycopg 3
        connection, one inside a transaction (its caller's, which it must not end), or one
        with notification handlers of the caller's."""
        if not isinstance(conn, psycopg.Connection):
            return None
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            return None
        if getattr(conn, "_notify_handlers", None):
            # The caller's own notification handlers: psycopg's notifies() would take
            # what they wait for (it does not call them), so this wait polls.
            return None
        return cls(conn, queue_table, look)

    def end_look(self) -> None:
        """End the transaction a look opened (not autocommit): notifications wait for it."""
        if not self._conn.autocommit:
            self._conn.rollback()

    def register(self, first_id: int) -> tuple[bool, dict[str, Any] | None]:
        """LISTEN, say that a session waits for the task ``first_id`` (its first attempt's
        id), and look at the task (``task_view``), in one round trip (a pipeline); the
        look's row, and whether a NOTIFY will come (False: no end trigger on the queue, or
        the lock's key is taken by another lock; the caller polls)."""
        task_key = first_id % 2**31
        self._first_id = first_id
        listen = sql.SQL("LISTEN {}").format(sql.Identifier(self._channel))
        params = {"key": self._key, "task_key": task_key, "table": self._table}
        try:
            with self._conn.pipeline():
                self._conn.execute(listen)
                self._listening = True
                registered = self._conn.execute(_REGISTER, {**params, "trigger": self._trigger})
                looked = self._conn.execute(*self._look)
            row = registered.fetchone()
            seen = looked.fetchone()
            names = [column.name for column in looked.description or ()]
            if not self._conn.autocommit:
                self._conn.commit()  # LISTEN takes effect at commit
        except psycopg.Error as exc:
            raise DatabaseError(f"wait_for_task: LISTEN {self._channel} failed: {exc}") from exc
        locked, triggered = (bool(row[0]), bool(row[1])) if row else (False, False)
        if locked:
            self._task_key = task_key
        return locked and triggered, None if seen is None else dict(zip(names, seen, strict=True))

    def unregister(self) -> None:
        """Let the lock go (``register`` took it for another id than the task's first)."""
        if self._task_key is not None:
            self._unlock_and_unlisten(unlisten=False)

    def wait(self, seconds: float) -> bool:
        """Until a notification on the channel or ``seconds`` pass; whether the task
        registered for was named (its end: ``look_and_close`` next)."""
        mine = str(self._first_id)
        try:
            # Consumed to its end: the generator holds the connection's lock meanwhile.
            notes = list(self._conn.notifies(timeout=max(0.0, seconds), stop_after=1))
        except psycopg.Error as exc:
            raise DatabaseError(f"wait_for_task: waiting on {self._channel} failed: {exc}") from exc
        return any(note.payload == mine for note in notes)

    def look_and_close(self) -> dict[str, Any] | None:
        """Look at the task and ``close``, in one round trip (a pipeline): after its end was
        heard, the look almost always ends the wait (a failure with a retry ahead does not:
        the caller registers again)."""
        try:
            with self._conn.pipeline():
                looked = self._conn.execute(*self._look)
                self._unlock_and_unlisten(unlisten=True, pipelined=True)
            seen = looked.fetchone()
            names = [column.name for column in looked.description or ()]
            if not self._conn.autocommit:
                self._conn.commit()
        except psycopg.Error as exc:
            raise DatabaseError(f"wait_for_task: UNLISTEN {self._channel} failed: {exc}") from exc
        return None if seen is None else dict(zip(names, seen, strict=True))

    def close(self) -> None:
        """UNLISTEN and let the lock go (the connection as it was before the wait)."""
        self._unlock_and_unlisten(unlisten=True)

    def _unlock_and_unlisten(self, unlisten: bool, pipelined: bool = False) -> None:
        """``pipelined``: queue the statements in the caller's pipeline, which ends the
        transaction itself."""
        statements = []
        if unlisten and self._listening:
            statements.append(sql.SQL("UNLISTEN {}").format(sql.Identifier(self._channel)))
            self._listening = False
        if self._task_key is not None:
            statements.append(
                sql.SQL("SELECT pg_advisory_unlock_shared({}, {})").format(
                    sql.Literal(self._key), sql.Literal(self._task_key)
                )
            )
            self._task_key = None
        if pipelined:
            for statement in statements:
                self._conn.execute(statement)
            return
        if not statements or self._conn.closed:
            return
        try:
            if self._conn.info.transaction_status != pq.TransactionStatus.IDLE:
                self._conn.rollback()  # a look that failed left its transaction open
            # No parameters: one simple query, both statements in one round trip.
            self._conn.execute(sql.SQL("; ").join(statements))
            if not self._conn.autocommit:
                self._conn.commit()
        except psycopg.Error as exc:
            raise DatabaseError(f"wait_for_task: UNLISTEN {self._channel} failed: {exc}") from exc
