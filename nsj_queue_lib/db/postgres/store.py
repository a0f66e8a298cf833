"""The worker's operations on a PostgreSQL queue table, for one queue table.

They run on psycopg 3 connections only; the client's operations, which
psycopg2 connections may run too, are ``PostgresClientStore``'s
(client_store.py), which this store extends. Driver errors leave this module
as ``DatabaseError`` (the driver's error is its ``__cause__``: errors.py).
"""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg.errors
from psycopg import pq

from nsj_queue_lib import model
from nsj_queue_lib.db import tally
from nsj_queue_lib.db.dialect import (
    check_claim_routine_version,
    claim_routine_name,
    missing_columns_error,
    settle_routine_name,
)
from nsj_queue_lib.db.moved_rows import retry_moved_rows
from nsj_queue_lib.db.postgres import retention
from nsj_queue_lib.db.postgres.client_store import COPY_THRESHOLD as COPY_THRESHOLD  # as before
from nsj_queue_lib.db.postgres.client_store import PostgresClientStore
from nsj_queue_lib.db.postgres.dialect import CLAIM_FUNCTION_ARGS, claim_function_version
from nsj_queue_lib.db.postgres.errors import wrap_driver_errors
from nsj_queue_lib.db.postgres.layout import HOT_DAY, NO_JIT, hot_partition, lock_key_of
from nsj_queue_lib.db.postgres.limits import CALL_COLUMNS
from nsj_queue_lib.db.postgres.rows import rows_as_dicts
from nsj_queue_lib.db.postgres.wire import (
    PreparedRoundTrip,
    RoundTripError,
    Steps,
    drive,
    drive_async,
    statement_steps,
)
from nsj_queue_lib.db.queue_store import HotSpace, TableHealth
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.exceptions import (
    AttemptFenced,
    ClaimRoutineError,
    DatabaseError,
    QueueTableMissingError,
)
from nsj_queue_lib.flow.deliveries import postgres_array
from nsj_queue_lib.flow.lock_keys import claim_skipping_busy_keys
from nsj_queue_lib.model import Claim, TaskRecord

# Keys of a task's liveness lock: (queue table oid, task id folded into 31 bits).
# Two-integer advisory locks live in a different key space from the one-bigint
# locks the maintenance services take, so the two can never collide; the
# table's oid keeps queues apart. The claim query folds ids the same way.
TASK_KEY_MODULUS = 2**31


def queue_lock_key(queue_oid: int) -> int:
    """The oid as the signed int4 the two-key advisory lock functions take."""
    return queue_oid - 2**32 if queue_oid >= 2**31 else queue_oid


# The claim's select list, in order (the task's columns, then liveness_locked).
# Known in advance: reading them from cursor.description would build a Column
# object per column of every claim.
_CLAIM_NAMES = (*model.CLAIMED_COLUMNS, "liveness_locked")


def _claimed_rows(cursor) -> list[dict[str, Any]]:
    pgresult = cursor.pgresult
    if pgresult is None or pgresult.nfields != len(_CLAIM_NAMES):
        raise DatabaseError(f"the claim returned an unexpected result shape ({cursor.description})")
    return [dict(zip(_CLAIM_NAMES, row, strict=True)) for row in cursor.fetchall()]


class PostgresQueueStore(PostgresClientStore):
    """The worker's operations (psycopg 3), and the client's (``PostgresClientStore``)."""

    # An empty look-up position's longest fresh life (2 s, from the look-up's start), and a
    # margin: only while fresh may a claim say "nothing" unlooked (claim_function.sql).
    claim_recheck_seconds: float | None = 2.2

    def __init__(self, queue_table: str, subscriber_table: str | None = None):
        super().__init__(queue_table, subscriber_table)
        # The claim function db_gen creates next to the table (claim_function.sql), called
        # at the libpq level, nothing prepared in the session (wire.py): $n placeholders.
        self.claim_function = claim_routine_name(queue_table)
        self.sql["claim_function_version"] = (
            "SELECT obj_description(to_regprocedure(%(signature)s), 'pg_proc')"
        )
        self.sql["claim_call"] = (
            f"SELECT {CALL_COLUMNS}, f.liveness_locked "
            f"FROM {self.claim_function or 'claim_routine_unavailable'}"
            "($1::bigint, $2::text, $3::integer, $4::integer, $5::integer, $6::varchar[], $7::varchar[], $8::varchar)"
            " AS f"
        )
        self.claim_statement = PreparedRoundTrip(self.sql["claim_call"], _CLAIM_NAMES)
        # The settle function db_gen creates next to the claim function (claim_function.sql).
        self.settle_function = settle_routine_name(queue_table) or "settle_routine_unavailable"
        self._complete_one = f"SELECT {self.settle_function}(%s::bigint[], %s::text[], NULL::int4)"
        self.handled_subscribers: frozenset[str] | None = None
        self._handled_array: str | None = None
        self.handled_processos: frozenset[str] | None = None
        self._processos_array: str | None = None
        self.worker_name: str | None = None
        # Known once bound: the partitioned layout's vacuum and retention differ.
        self.partitioned = False
        self._maintained = queue_table  # what the vacuum service vacuums
        self._queue_oid: int | None = None
        self._queue_key = 0
        self._tally_values = dict(self._query_values, **tally.table_values(queue_table))
        self.tally_sql = render_queries("postgres", self._tally_values, "tally.sql")
        self._has_tally: bool | None = None

    def set_handled_subscribers(self, handled: frozenset[str] | None) -> None:
        """The subscribers whose deliveries this store's claims take (None: all of them;
        nsj_queue_lib/flow/deliveries.py)."""
        self.handled_subscribers = handled
        self._handled_array = postgres_array(handled)

    def set_handled_processos(self, handled: frozenset[str] | None) -> None:
        """The processos whose tasks this store's claims take (None: all of them;
        nsj_queue_lib/flow/deliveries.py)."""
        self.handled_processos = handled
        self._processos_array = postgres_array(handled)

    def _use_partitioned_layout(self, conn) -> None:
        """The statements of unfinished rows pinned to their partition (planned on it alone);
        vacuum and analyze on it: a partitioned table has no rows of its own, and the day
        partitions are only ever inserted into. Warns when the days ahead run short."""
        retention.check_days_ahead(conn, self.queue_table)
        self._maintained = hot_partition(self.queue_table)
        pinned = dict(self._query_values, hot=f"finished_day = {HOT_DAY} AND ")
        self.sql.update(render_queries("postgres", dict(pinned, hot_t=f"t.{pinned['hot']}")))
        self.tally_sql = render_queries(
            "postgres", dict(self._tally_values, hot_t=f"t.{pinned['hot']}"), "tally.sql"
        )
        self.sql["vacuum"] = f"VACUUM (ANALYZE, SKIP_LOCKED) {self._maintained}"
        self.sql["analyze"] = f"ANALYZE (SKIP_LOCKED) {self._maintained}"

    def set_worker_name(self, worker: str | None) -> None:
        """The name the claims write in each attempt's ``worker`` column."""
        self.worker_name = worker

    # -- runtime operations (psycopg 3) --

    @property
    def queue_number(self) -> int:
        if self._queue_oid is None:
            raise RuntimeError(f"{self.queue_table}: bind() has not run on a connection yet")
        return self._queue_oid

    def bind(self, conn) -> int:
        """The table's oid (which names its locks), once its claim function is known good."""
        self._queue_oid, self.partitioned = self._table_oid(conn)
        if self.partitioned:
            self._use_partitioned_layout(conn)
        self._check_claim_function(conn)
        self._check_lifecycle_columns(conn)
        self._queue_key = queue_lock_key(self._queue_oid)
        return self._queue_oid

    def _table_oid(self, conn) -> tuple[int, bool]:
        """The key of the table's locks, and whether it is partitioned (db/postgres/layout.py).
        The key is the table's oid, or the oid of the table it was migrated from: workers
        bound before the migration keep that one (db/postgres/migration.py)."""
        try:
            with wrap_driver_errors("queue_oid"):
                oid, partitioned, comment = conn.execute(
                    self.sql["queue_oid"], {"table": self.queue_table}
                ).fetchone()
                return lock_key_of(comment) or int(oid), bool(partitioned)
        except DatabaseError as exc:
            missing = (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)
            if isinstance(exc.__cause__, missing):
                raise QueueTableMissingError(
                    f"table {self.queue_table} does not exist"
                ) from exc.__cause__
            raise

    def _check_claim_function(self, conn) -> None:
        if self.claim_function is None:
            raise ClaimRoutineError(
                f"QUEUE_TABLE: {self.queue_table}'s name is too long for its claim function "
                f"(claim_next_<table>_v<N> must fit in 63 characters)"
            )
        signature = f"{self.claim_function}{CLAIM_FUNCTION_ARGS}"
        with wrap_driver_errors("claim_function_version"):
            row = conn.execute(
                self.sql["claim_function_version"], {"signature": signature}
            ).fetchone()
        found = None if row is None else row[0]
        check_claim_routine_version(self.claim_function, found, claim_function_version())

    def _check_lifecycle_columns(self, conn) -> None:
        try:
            with wrap_driver_errors("lifecycle_columns"):
                conn.execute(self.sql["lifecycle_columns"])
        except DatabaseError as exc:
            if isinstance(exc.__cause__, psycopg.errors.UndefinedColumn):
                raise missing_columns_error(self.queue_table, exc.__cause__) from exc.__cause__
            raise

    @property
    def queue_key(self) -> int:
        """The first key of this queue's task liveness locks (after ``bind``)."""
        return self._queue_key

    def task_key(self, task_id: int) -> int:
        """The second key of a task's liveness lock."""
        return task_id % TASK_KEY_MODULUS

    # Executor connections are autocommit: transactions are opened and closed
    # with explicit statements, so that ending one task, claiming the next and
    # opening the next task's transaction travel in a single pipeline (one
    # round trip per task). psycopg's commit() would force a sync of its own.

    # claim and complete_and_claim are written as wire steps (wire.py), run
    # blocking by the executor threads and awaited by the async executor.

    def claim(self, conn) -> Claim | None:
        return drive(conn, self._claim_steps(conn))

    async def claim_async(self, conn) -> Claim | None:
        return await drive_async(conn, self._claim_steps(conn))

    def complete_and_claim(
        self, conn, task_id: int, mensagem: str, claim_next: bool, first_id=None
    ) -> Claim | None:
        return drive(conn, self._complete_and_claim_steps(conn, task_id, mensagem, claim_next))

    async def complete_and_claim_async(
        self, conn, task_id: int, mensagem: str, claim_next: bool, first_id=None
    ) -> Claim | None:
        steps = self._complete_and_claim_steps(conn, task_id, mensagem, claim_next)
        return await drive_async(conn, steps)

    def _claim_steps(self, conn) -> Steps[Claim | None]:
        """Claim the next ready task in a transaction of its own, its liveness lock taken;
        on return the task's transaction is open, or ``conn`` idle when none was ready."""
        rows = yield from self._claim_call_steps(
            conn, None, None, 1, b"COMMIT AND CHAIN", begin=True
        )
        return (yield from self._claimed(conn, rows))

    def _complete_and_claim_steps(
        self, conn, task_id: int, mensagem: str, claim_next: bool
    ) -> Steps[Claim | None]:
        """Settle a task as 'sucesso', release its lock, claim the next task, commit.

        One round trip and one commit: the next claim runs in the finished
        task's transaction, so if that commit fails the claim is undone with it
        (its row stays 'pendente'; the lock it took is released here).
        """
        # AND CHAIN: the next task's transaction opens in the same statement.
        commit = b"COMMIT AND CHAIN" if claim_next else b"COMMIT"
        limit = 1 if claim_next else 0
        rows = yield from self._claim_call_steps(conn, task_id, mensagem, limit, commit)
        return (yield from self._claimed(conn, rows)) if claim_next else None

    def claim_call(
        self,
        conn,
        done_id: int | None,
        mensagem: str | None,
        claim_limit: int,
        commit: bytes | None,
        begin: bool | tuple[bytes, ...] = False,
    ) -> list[dict[str, Any]]:
        """The claim function in one round trip: ``done_id`` becomes 'sucesso' (its lock
        released), up to ``claim_limit`` tasks are claimed (their locks taken), then
        ``commit`` (None: the transaction stays open). On failure the transaction is
        rolled back and the claimed rows' locks released."""
        steps = self._claim_call_steps(conn, done_id, mensagem, claim_limit, commit, begin)
        return drive(conn, steps)

    def _claim_call_steps(
        self,
        conn,
        done_id: int | None,
        mensagem: str | None,
        claim_limit: int,
        commit: bytes | None,
        begin: bool | tuple[bytes, ...] = False,
    ) -> Steps[list[dict[str, Any]]]:
        params = self.claim_params(done_id, mensagem, claim_limit)
        with wrap_driver_errors("complete_task" if done_id is not None else "claim"):
            try:
                # A transaction of its own holds the claim alone: its commit need not wait for
                # the disk (the task's own commit, chained after it, does, and makes the claim
                # durable with it). Half a millisecond or more off every idle worker's latency.
                steps = self.claim_statement.steps(
                    conn, params, commit, begin=begin, unflushed=begin is True
                )
                return (yield from steps)
            except RoundTripError as exc:
                self.unlock_uncommitted_claim(conn, exc.rows)
                raise exc.error from None

    def claim_params(
        self, done_id: int | None, mensagem: str | None, claim_limit: int
    ) -> tuple[Any, ...]:
        """The claim function's parameters (``claim_statement``): ``done_id`` to settle with
        ``mensagem`` (None: none), up to ``claim_limit`` tasks to claim."""
        done_key = 0 if done_id is None else self.task_key(done_id)
        return (
            done_id,
            mensagem,
            self._queue_key,
            done_key,
            claim_limit,
            self._handled_array,
            self._processos_array,
            self.worker_name,
        )

    def _claimed(self, conn, rows: list[dict[str, Any]]) -> Steps[Claim | None]:
        if not rows:
            yield from statement_steps(conn, b"ROLLBACK")  # the empty transaction opened for a task
            return None
        row = rows[0]
        locked = bool(row.pop("liveness_locked"))
        return Claim(TaskRecord.from_row(row), locked)

    def unlock_uncommitted_claim(self, conn, claimed: list[dict[str, Any]]) -> None:
        """A claim whose round trip failed: its transaction ends (an aborted one would refuse
        every later statement on ``conn``), its rows are 'pendente' again, so its locks must
        go too.

        Best effort: when the connection is broken its locks went with it.
        """
        try:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
        except psycopg.Error:
            return
        for row in claimed:
            if row.get("liveness_locked"):
                try:
                    self.unlock_task(conn, row["id"])
                except DatabaseError:
                    return

    def claim_uncommitted(self, conn) -> TaskRecord | None:
        """Claim without database locks and leave the claim's transaction open.

        For liveness locks held elsewhere (the socket server): the caller takes
        them, then commits with ``commit_and_begin``, or rolls back to return
        the tasks to the queue. Until then nobody sees the rows claimed.
        """

        def attempt() -> TaskRecord | None:
            with conn.pipeline():
                conn.execute("BEGIN")
                conn.execute(self.sql["claim_settings"])
                cursor = conn.cursor()
                handled = self.handled_subscribers
                processos = self.handled_processos
                cursor.execute(
                    self.sql["claim_uncommitted"],
                    {
                        "handled_subscribers": None if handled is None else sorted(handled),
                        "handled_processos": None if processos is None else sorted(processos),
                        "worker": self.worker_name,
                    },
                    binary=True,
                )
            rows = _claimed_rows(cursor)
            if not rows:
                conn.execute("ROLLBACK")
                return None
            return TaskRecord.from_row(rows[0])

        with wrap_driver_errors("claim"):
            # A row moved to its day's partition meanwhile (a partitioned table: the claim
            # function says why) is skipped as a busy key's is.
            return claim_skipping_busy_keys(
                attempt,
                lambda exc: isinstance(
                    exc, (psycopg.errors.UniqueViolation, psycopg.errors.SerializationFailure)
                ),
                conn.rollback,
            )

    def commit_and_begin(self, conn) -> None:
        with wrap_driver_errors("commit"):
            with conn.pipeline():
                conn.execute("COMMIT")
                conn.execute("BEGIN")

    def complete_if_running(self, conn, task_id: int, mensagem: str, first_id=None) -> bool:
        """Write 'sucesso' in the open transaction with the statement of a commit group's end
        (the settle function, which finds the children without ``first_id``; its NULL key
        leaves the liveness lock to the caller). False when the row is no longer
        'processando': the transaction is then aborted, for the caller to roll back."""
        try:
            with wrap_driver_errors("complete_task"):
                conn.execute(self._complete_one, ([task_id], [mensagem]))
        except AttemptFenced:
            return False
        return True

    def seconds_until_next_due(self, conn) -> float | None:
        with wrap_driver_errors("next_due"):
            return conn.execute(self.sql["next_due"]).fetchone()[0]

    # Transaction control on autocommit connections (executor, admin).

    def begin(self, conn) -> None:
        with wrap_driver_errors("begin"):
            conn.execute("BEGIN")

    def commit(self, conn) -> None:
        with wrap_driver_errors("commit"):
            conn.execute("COMMIT")

    def rollback(self, conn) -> None:
        with wrap_driver_errors("rollback"):
            conn.execute("ROLLBACK")

    def rollback_and_begin(self, conn) -> None:
        # One statement: between a ROLLBACK and a BEGIN the session would be 'idle' while
        # it holds the task's liveness lock, which find_orphans reads as a lock left behind.
        with wrap_driver_errors("rollback"):
            conn.execute("ROLLBACK AND CHAIN")

    def in_transaction(self, conn) -> bool:
        # Asked twice per task on the hot path: libpq's status, without building the
        # ConnectionInfo that ``conn.info`` makes on every access (psycopg 3).
        pgconn = getattr(conn, "pgconn", None)
        status = conn.info.transaction_status if pgconn is None else pgconn.transaction_status
        return bool(status != pq.TransactionStatus.IDLE)

    def unlock_task(self, conn, task_id: int) -> None:
        params = {"queue_key": self._queue_key, "task_key": self.task_key(task_id)}
        with wrap_driver_errors("unlock_task"):
            conn.execute(self.sql["unlock_task"], params)

    def fail_and_retry(
        self,
        conn,
        task_id: int,
        status: str,
        mensagem: str,
        delay_seconds: float,
        counted: bool = True,
    ) -> int | None:
        params = {
            "id": task_id,
            "status": status,
            "mensagem": mensagem,
            "delay_seconds": delay_seconds,
            "attempt_step": int(counted),
        }
        with wrap_driver_errors("fail_and_retry"):
            row = conn.execute(self.sql["fail_and_retry"], params).fetchone()
        return None if row is None else int(row[0])

    def fail_and_bury(
        self, conn, task_id: int, status: str, mensagem: str, payload: str | None
    ) -> int | None:
        params = {"id": task_id, "status": status, "mensagem": mensagem, "payload": payload}
        with wrap_driver_errors("fail_and_bury"):
            row = conn.execute(self.sql["fail_and_bury"], params).fetchone()
        return None if row is None else int(row[0])

    def fail_final(self, conn, task_id: int, status: str, mensagem: str) -> bool:
        params = {"id": task_id, "status": status, "mensagem": mensagem}
        with wrap_driver_errors("fail_final"):
            return conn.execute(self.sql["fail_final"], params).fetchone() is not None

    def worker_seen(self, conn, worker: str, processos: str | None) -> None:
        with wrap_driver_errors("worker_seen"):
            conn.execute(self.sql["worker_seen"], {"worker": worker, "processos": processos})

    def worker_left(self, conn, worker: str) -> None:
        with wrap_driver_errors("worker_left"):
            conn.execute(self.sql["worker_left"], {"worker": worker})

    def release(self, conn, task_id: int) -> bool:
        with wrap_driver_errors("release_task"):
            return conn.execute(self.sql["release_task"], {"id": task_id}).rowcount == 1

    def try_service_lock(self, conn, key: int) -> bool:
        with wrap_driver_errors("try_service_lock"):
            return bool(conn.execute(self.sql["try_service_lock"], {"key": key}).fetchone()[0])

    def service_unlock(self, conn, key: int) -> None:
        with wrap_driver_errors("service_unlock"):
            conn.execute(self.sql["service_unlock"], {"key": key})

    def find_orphans(self, conn, limit: int, check_session_locks: bool) -> list[TaskRecord]:
        """'processando' rows nobody is settling, row-locked until the transaction ends.

        Without ``check_session_locks`` only the row locks are considered and
        the caller asks the socket server about the liveness locks.
        """
        params = {
            "queue_oid": self.queue_number,
            "limit": limit,
            "check_db_locks": check_session_locks,
        }

        def find() -> list[TaskRecord]:
            with wrap_driver_errors("find_orphans"), conn.cursor() as cur:
                cur.execute(self.sql["find_orphans"], params)
                return [TaskRecord.from_row(row) for row in rows_as_dicts(cur)]

        # SKIP LOCKED skips a row being settled, not one whose settling committed after
        # the statement's snapshot: on the partitioned layout it moved (moved_rows).
        return retry_moved_rows(conn, find)

    def promote_due(self, conn, limit: int) -> int:
        with wrap_driver_errors("promote_due"):
            return conn.execute(self.sql["promote_due"], {"limit": limit}).rowcount

    def has_stale_pending(self, conn, wait_seconds: float) -> bool:
        with wrap_driver_errors("count_stale_pending"):
            row = conn.execute(
                self.sql["count_stale_pending"], {"wait_seconds": wait_seconds}
            ).fetchone()
        return row[0] > 0

    def notify(self, conn, channel: str, payload: str = "") -> None:
        with wrap_driver_errors("notify"):
            conn.execute(self.sql["notify"], {"channel": channel, "payload": payload})

    def purge_round(self, conn, max_age_days: int, limit: int, sides=None) -> int:
        if not self.partitioned:
            self._notice_migration(conn)
        if self.partitioned:
            return retention.rotate(conn, self.queue_table, max_age_days, limit, sides)
        params = {"max_age_days": max_age_days, "limit": limit}
        with wrap_driver_errors("purge"):
            tasks = [row[0] for row in conn.execute(self.sql["purge"], params).fetchall()]
        if sides is not None and tasks:
            sides.tasks(conn, tasks)
        return len(tasks)

    def _notice_migration(self, conn) -> None:
        """A worker bound before ``nsjq upgrade --layout partitioned`` moved its table goes
        on with the partitioned statements from its next purge: left on the plain purge, it
        would attach no day ahead and, once the days made by the migration ran out, every
        settle would find no partition for its row."""
        _, partitioned = self._table_oid(conn)
        if partitioned:
            self._use_partitioned_layout(conn)
            self.partitioned = True

    def fold_counts(self, conn, max_age_days: int) -> tally.FoldResult | None:
        """A fold of the tally (db/tally.py); None where db_gen --upgrade has not made its
        tables yet."""
        with wrap_driver_errors("tally"):
            if self._has_tally is None:
                state = self._tally_values["tally_state_table"]
                found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (state,)).fetchone()
                self._has_tally = bool(found[0])
            if not self._has_tally:
                return None
            conn.execute(NO_JIT)  # the fold's reads cross every partition
            return tally.fold(conn, self.tally_sql, max_age_days)

    def table_health(self, conn) -> TableHealth | None:
        with wrap_driver_errors("table health"):
            row = conn.execute(self.sql["table_health"], {"table": self._maintained}).fetchone()
        if row is None:  # no statistics yet
            return TableHealth(0, 0, may_maintain=False)
        return TableHealth(int(row[0]), int(row[1]), may_maintain=bool(row[2]))

    def vacuum(self, conn) -> None:
        with wrap_driver_errors("vacuum"):
            conn.execute(self.sql["vacuum"])

    def analyze(self, conn) -> None:
        with wrap_driver_errors("analyze"):
            conn.execute(self.sql["analyze"])

    def hot_space(self, conn) -> HotSpace | None:
        if self._maintained == self.queue_table:  # one table holds the history too
            return None
        with wrap_driver_errors("hot partition space"):
            row = conn.execute(self.sql["hot_space"], {"table": self._maintained}).fetchone()
        return None if row is None else HotSpace(int(row[0]), int(row[1]), int(row[2]))

    def compact_hot(self, conn, lock_timeout_ms: int) -> bool:
        if self._maintained == self.queue_table:
            raise RuntimeError(f"{self.queue_table}: the plain layout has no hot partition")
        # VACUUM cannot run in a transaction, so the timeout is the session's for a moment.
        with wrap_driver_errors("compact the hot partition"):
            conn.execute(f"SET lock_timeout = {int(lock_timeout_ms)}")
            try:
                conn.execute(f"VACUUM (FULL, ANALYZE) {self._maintained}")
            except psycopg.errors.LockNotAvailable:
                return False
            finally:
                conn.execute("RESET lock_timeout")
        return True
