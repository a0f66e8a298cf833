"""The queue's operations on MySQL >= 8.0 and MariaDB >= 10.6, for one queue table.

Same protocols and meaning as ``PostgresQueueStore``; PyMySQL connections.
What differs from PostgreSQL, and why:
- A task's liveness lock is a named lock, ``<queue prefix><task id>``
  (``names.py``), held by the session like an advisory lock.
- The claim is one CALL of the queue's claim procedure (claim_procedure.sql),
  which ``db_gen`` creates with the table and ``bind`` checks by its COMMENT.
  After a task, the same CALL commits the task and then claims: the
  procedure's lock-free look-up of the first ready task needs a statement
  outside any transaction. A failing claim is therefore undone on its own,
  never with the finished task's work.
- A deadlock (1213) or lock wait timeout (1205) while claiming or completing
  is retried here, never surfaced as a task failure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from nsj_queue_lib.db import layout_cache, tally
from nsj_queue_lib.db.dialect import check_claim_routine_version, claim_routine_name
from nsj_queue_lib.db.mysql import retention
from nsj_queue_lib.db.mysql.dialect import claim_procedure_versions
from nsj_queue_lib.db.mysql.errors import (
    ER_LOCK_DEADLOCK,
    ER_LOCK_WAIT_TIMEOUT,
    error_code,
    is_duplicate_key,
    is_retryable,
    logger,
    retry_on_lock_errors,
    wrap_driver_errors,
)
from nsj_queue_lib.db.mysql.family_store import LOST, NOT_RUNNING, MysqlFamilyStore
from nsj_queue_lib.db.mysql.layout import FINISHED_DAY_NOW, HOT_DAY, HOT_PARTITION, hot_pin
from nsj_queue_lib.db.mysql.lock_keys import lock_key_free
from nsj_queue_lib.db.mysql.names import database_of, lock_prefix, qualified_table, table_exists
from nsj_queue_lib.db.mysql.procedure import Result, Statement, StatementFailed, call_procedure
from nsj_queue_lib.db.mysql.rows import (
    claimed_row,
    claims_from_batch_document,
    claims_from_task_rows,
    rows_as_dicts,
    task_from_json,
    task_from_object,
)
from nsj_queue_lib.db.mysql.statistics import InnodbStatistics
from nsj_queue_lib.db.queue_store import TableHealth
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.exceptions import AttemptFenced, ClaimRoutineError, DatabaseError
from nsj_queue_lib.flow.deliveries import json_array
from nsj_queue_lib.flow.lock_keys import claim_skipping_busy_keys
from nsj_queue_lib.identifiers import split_table_name
from nsj_queue_lib.model import Claim, TaskRecord


class MysqlQueueStore(MysqlFamilyStore):
    dialect = "mysql"

    def __init__(self, queue_table: str, subscriber_table: str | None = None):
        super().__init__(queue_table, subscriber_table)
        self.claim_procedure = claim_routine_name(queue_table)
        self._lock_prefixes: dict[str | None, str] = {}
        self._statistics = InnodbStatistics(self.sql, queue_table)
        self._tally_values = tally.table_values(queue_table)
        self.tally_sql = self._render_tally(hot_t="")
        self._has_tally: bool | None = None

    def _render_tally(self, hot_t: str) -> dict[str, str]:
        values = {"queue_table": self.queue_table, **self._tally_values, "hot_t": hot_t}
        return render_queries("mysql", values, "tally.sql")

    # -- names --

    def lock_prefix(self, conn: Any) -> str:
        # Asked several times per task: computed once per database (the one of
        # the connection counts only when the queue table names none).
        database = None if self._table_schema else database_of(conn)
        prefix = self._lock_prefixes.get(database)
        if prefix is None:
            prefix = self._lock_prefixes[database] = lock_prefix(
                qualified_table(self.queue_table, conn)
            )
        return prefix

    def task_lock_name(self, conn: Any, task_id: int) -> str:
        """The name of a task's liveness lock (held by the connection running it)."""
        return f"{self.lock_prefix(conn)}{int(task_id)}"

    def service_lock_name(self, conn: Any, key: int) -> str:
        """The name of a maintenance service's lock (``key`` names queue and service)."""
        return f"{self.lock_prefix(conn)}svc:{int(key)}"

    # -- the vacuum service: statistics only (InnoDB purges old row versions itself) --

    def table_health(self, conn: Any) -> TableHealth:
        return self._statistics.health(conn, self.server(conn).flavour)

    def vacuum(self, conn: Any) -> None:
        raise NotImplementedError("InnoDB removes old row versions itself: nothing to vacuum")

    def analyze(self, conn: Any) -> None:
        self._statistics.analyze(conn, self.server(conn).flavour)

    def hot_space(self, conn: Any) -> None:
        # No table here the service rewrites: InnoDB reuses a partition's freed pages in
        # place, and rewriting MariaDB's p_hot (REBUILD PARTITION) would hold the whole table.
        return None

    def compact_hot(self, conn: Any, lock_timeout_ms: int) -> bool:
        raise NotImplementedError("MySQL/MariaDB queues have no table the service rewrites")

    # -- the tally service (db/tally.py) --

    def fold_counts(self, conn: Any, max_age_days: int) -> tally.FoldResult | None:
        """A fold of the tally; None where db_gen --upgrade has not made its tables yet."""
        with wrap_driver_errors("tally"):
            if self._has_tally is None:
                self._has_tally = table_exists(conn, self._tally_values["tally_state_table"])
            if not self._has_tally:
                return None
            return tally.fold(conn, self.tally_sql, max_age_days)

    # -- start --

    def bind(self, conn: Any) -> int:
        number = super().bind(conn)
        if self.is_partitioned(conn):
            self._use_partitioned_layout(conn)
        if self.claim_procedure is None:
            raise ClaimRoutineError(
                f"QUEUE_TABLE: {self.queue_table}'s name is too long for its claim procedure "
                "(claim_next_<table>_v<N> must fit in 64 characters)"
            )
        schema, name = split_table_name(self.claim_procedure)
        with wrap_driver_errors("claim_procedure_version"), conn.cursor() as cur:
            cur.execute(
                self.sql["claim_tasks"]["procedure_version"], {"schema": schema, "name": name}
            )
            row = cur.fetchone()
        found = None if row is None else row[0]
        # Either server family's variant (db_gen --server): MariaDB runs both.
        check_claim_routine_version(self.claim_procedure, found, claim_procedure_versions())
        return number

    def is_partitioned(self, conn: Any) -> bool:
        """Whether the queue table has the partitioned layout (db/mysql/layout.py)."""
        with wrap_driver_errors("layout"):
            return layout_cache.probe(conn, self.dialect, self.queue_table)

    def _use_partitioned_layout(self, conn: Any) -> None:
        """The statements pinned to the hot partition; the statistics service looks at the
        hot partition; retention drops days. Warns when the days ahead run short."""
        self._pin_to_hot_partition()
        self._statistics = InnodbStatistics(self.sql, self.queue_table, HOT_PARTITION)
        retention.check_days_ahead(conn, self.sql["retention"], self.queue_table)

    def _know_layout(self, conn: Any) -> None:
        """A client's store (never bound) learns the layout before a statement by task id."""
        if self.partitioned:
            return
        with wrap_driver_errors("layout"):
            if layout_cache.partitioned(conn, self.dialect, self.queue_table):
                self._pin_to_hot_partition()

    def _pin_to_hot_partition(self) -> None:
        """The statements of unfinished rows pinned to the hot partition (pruned to it, not
        probed in every partition); the settles set the partition key themselves."""
        self.partitioned = True
        self.sql = self._render_queries(
            dict(
                self._query_values,
                lock_key_free=lock_key_free(self.queue_table, "t", "NOW(6)", HOT_DAY),
                hot=hot_pin(),
                hot_t=hot_pin("t"),
                finished_day_set=f", finished_day = {FINISHED_DAY_NOW}",
            )
        )
        self.tally_sql = self._render_tally(hot_t=hot_pin("t"))

    def purge_round(self, conn: Any, max_age_days: int, limit: int, sides: Any = None) -> int:
        if self.partitioned:
            return retention.rotate(
                conn, self.sql["retention"], self.queue_table, max_age_days, sides
            )
        return super().purge_round(conn, max_age_days, limit, sides)

    # -- claiming (the liveness lock in the database) --

    def claim(self, conn: Any) -> Claim | None:
        """Claim the next ready task, its liveness lock taken by ``conn``, committed.

        ``conn`` (autocommit) is the connection that will run the task. On
        return a transaction is open for its handler, or, when nothing was
        claimed, ``conn`` is idle.
        """

        def attempt() -> Claim | None:
            conn.begin()
            try:
                return self._call(conn, None, None)
            except StatementFailed:
                self._release_claimed_lock(conn)
                raise

        return _retried_claim(conn, attempt)

    def claim_many(self, conn: Any, limit: int, begun: bool = False) -> list[Claim]:
        """Claim up to ``limit`` ready tasks in one CALL and one commit (group commit), their
        liveness locks taken by ``conn``; a transaction is open on return when any was
        claimed, else ``conn`` is idle. ``begun``: the caller opened the claim's (empty)
        transaction, with the commit before it (COMMIT AND CHAIN), one round trip fewer."""
        chained = begun

        def attempt() -> list[Claim]:
            nonlocal chained
            if not chained:  # a retry comes after a rollback: it begins again
                conn.begin()
            chained = False
            try:
                with conn.cursor() as cur:
                    cur.execute("SET @nsjq_claim_limit = %s", (limit,))
                result = call_procedure(conn, self._procedure_call(conn, None, None))
            except StatementFailed:
                self._release_batch_locks(conn)
                raise
            try:
                return _claims_of_batch(conn, result)
            except Exception:
                # The CALL has committed its claims. Tasks nobody will run must not keep
                # their liveness locks on a connection that stays open: without them the
                # retry service rescues the tasks, as after a crash.
                self._release_batch_locks(conn)
                raise

        return _retried_claim(conn, attempt)

    def _release_batch_locks(self, conn: Any) -> None:
        """After a failed batch CALL: the liveness locks its claims took (best effort)."""
        with suppress(Exception):  # the connection may be gone, and its locks with it
            conn.rollback()  # the claims first: their rows go back to 'pendente'
            with conn.cursor() as cur:
                cur.execute("SELECT @nsjq_claimed_batch")
                (claimed,) = cur.fetchone()
            if isinstance(claimed, (bytes, bytearray)):  # a user variable's string comes as bytes
                claimed = claimed.decode("ascii")
            for task_id in (claimed or "").split(","):
                if task_id:
                    self.unlock_task(conn, int(task_id))
        self._release_claimed_lock(conn)

    def complete_and_claim(
        self,
        conn: Any,
        task_id: int,
        mensagem: str,
        claim_next: bool,
        first_id: int | None = None,
    ) -> Claim | None:
        """Settle a task as 'sucesso', release its lock, commit; then claim the next task.

        One CALL of the claim procedure. A lock wait timeout on the completion
        is retried in the same transaction. A deadlock there has already rolled
        the handler's work back: the task then goes back to 'pendente' to run
        again (nothing of it was committed), never recorded as a failure. A
        failing claim after the committed completion is undone and, after a
        deadlock or lock wait timeout, tried again.
        """
        if not claim_next:
            self._complete_and_commit(conn, task_id, mensagem, first_id)
            return None
        with wrap_driver_errors("complete_task"):
            try:
                return self._call(conn, task_id, mensagem)
            except StatementFailed as failed:
                if self._completion_committed(conn, task_id):
                    return self._after_committed_completion(conn, task_id, failed)
                return self._after_failed_completion(conn, task_id, mensagem, failed, first_id)

    def _call(self, conn: Any, task_id: int | None, mensagem: str | None) -> Claim | None:
        """One CALL: complete ``task_id`` (when given), then claim; the claimed task or None."""
        result = call_procedure(conn, self._procedure_call(conn, task_id, mensagem))
        try:
            return self._claimed(conn, result)
        except Exception:
            # Committed, its task will not run here: its liveness lock goes, so that the
            # retry service rescues it, as after a crash.
            self._release_claimed_lock(conn)
            raise

    def _procedure_call(self, conn: Any, task_id: int | None, mensagem: str | None) -> Statement:
        return (
            f"CALL {self.claim_procedure}"
            "(%(id)s, %(mensagem)s, %(lock_prefix)s, %(handled)s, %(processos)s, %(worker)s)",
            {
                "id": task_id,
                "mensagem": mensagem,
                "lock_prefix": self.lock_prefix(conn),
                "handled": json_array(self.handled_subscribers),
                "processos": json_array(self.handled_processos),
                "worker": self.worker_name,
            },
        )

    def _claimed(self, conn: Any, result: Result) -> Claim | None:
        """The task the CALL returned (its COMMIT AND CHAIN ran), or None with ``conn`` idle.

        The row is one JSON document that also holds ``liveness_locked``, the
        GET_LOCK result; nothing claimed is a NULL document.
        """
        documents = [document for (document,) in result.rows if document is not None]
        if not documents:
            conn.rollback()  # the empty transaction opened for a task
            return None
        return _claim_of_object(task_from_json(documents[0]))

    def _release_claimed_lock(self, conn: Any) -> None:
        """After a failed CALL: the liveness lock its claim may have taken (best effort)."""
        with suppress(Exception):  # the connection may be gone, and its locks with it
            with conn.cursor() as cur:
                cur.execute(
                    self.sql["claim_tasks"]["release_claimed"],
                    {"lock_prefix": self.lock_prefix(conn)},
                )

    def _completion_committed(self, conn: Any, task_id: int) -> bool:
        """After a failed CALL: whether its completion of ``task_id`` had been committed.

        The procedure names the task in @nsjq_completed right after the
        commit; an older value names another task (ids are never reused).
        """
        with conn.cursor() as cur:
            cur.execute("SELECT @nsjq_completed")
            return bool(cur.fetchone()[0] == task_id)

    def _after_committed_completion(
        self, conn: Any, task_id: int, failed: StatementFailed
    ) -> Claim | None:
        """The finished task was committed, then the claim after it failed: claim again.

        A deadlock or lock wait timeout is retried as a fresh claim. Any other
        error, or a fresh claim that fails too, leaves the task done and
        nothing claimed (logged), never raised: the caller would take it for
        a failed completion. The next claim on this connection meets the
        error again if it lasts.
        """
        with suppress(Exception):  # the connection may be gone; its locks with it
            conn.rollback()
        self._release_claimed_lock(conn)
        error: BaseException = failed.error
        if is_retryable(failed):
            logger.debug(
                "task=%s: %s while claiming the next task; claiming again", task_id, failed.error
            )
            try:
                return self.claim(conn)
            except DatabaseError as exc:
                error = exc
        logger.warning("task=%s: done, but claiming the next task failed: %s", task_id, error)
        return None

    def _after_failed_completion(
        self,
        conn: Any,
        task_id: int,
        mensagem: str,
        failed: StatementFailed,
        first_id: int | None,
    ) -> Claim | None:
        """The CALL failed before its completion was committed: what the failure left, settled."""
        code = error_code(failed)
        if code == ER_LOCK_WAIT_TIMEOUT:
            # Only the statement was undone: the transaction is still open.
            if self._complete(conn, task_id, mensagem, first_id) is LOST:
                self._give_back(conn, task_id, lambda: self.unlock_task(conn, task_id))
            else:
                self.unlock_task(conn, task_id)
                conn.commit()
            return self.claim(conn)
        if code == ER_LOCK_DEADLOCK:
            logger.warning(
                "task=%s: %s while completing; the task goes back to the queue",
                task_id,
                failed.error,
            )
            self._give_back(conn, task_id, lambda: self.unlock_task(conn, task_id))
            return self.claim(conn)
        raise failed

    def _complete_and_commit(
        self, conn: Any, task_id: int, mensagem: str, first_id: int | None
    ) -> None:
        """'sucesso' and the lock's release, committed, with nothing claimed after it."""
        with wrap_driver_errors("complete_task"):
            outcome = self._complete(conn, task_id, mensagem, first_id)
            if outcome is LOST:
                self._give_back(conn, task_id, lambda: self.unlock_task(conn, task_id))
                return
            if outcome is NOT_RUNNING:  # the fence, as in the claim procedure
                conn.rollback()
                self.unlock_task(conn, task_id)
                raise AttemptFenced(f"complete_task: task {task_id} is no longer 'processando'")
            self.unlock_task(conn, task_id)
            conn.commit()

    def unlock_task(self, conn: Any, task_id: int) -> None:
        """Release a task's liveness lock."""
        with wrap_driver_errors("unlock_task"), conn.cursor() as cur:
            cur.execute(
                self.sql["unlock_task"]["sql"], {"name": self.task_lock_name(conn, task_id)}
            )

    # -- claiming for the socket server's liveness locks --

    def claim_uncommitted(self, conn: Any) -> TaskRecord | None:
        """Claim without database locks and leave the claim's transaction open.

        For liveness locks held elsewhere (the socket server): the caller takes
        them, then commits with ``commit_and_begin``, or rolls back to return
        the task to the queue. Until then nobody sees the row claimed.
        """
        steps = self.sql["claim_tasks"]

        def attempt() -> TaskRecord | None:
            conn.begin()
            with conn.cursor() as cur:
                cur.execute(
                    steps["select"],
                    {
                        "handled_subscribers": json_array(self.handled_subscribers),
                        "handled_processos": json_array(self.handled_processos),
                    },
                )
                rows = rows_as_dicts(cur)
                if not rows:
                    conn.rollback()
                    return None
                row = rows[0]
                cur.execute(steps["mark"], {"id": row["id"], "worker": self.worker_name})
                payloads = self._first_payloads(cur, row)
            return TaskRecord.from_row(claimed_row(row, payloads))

        def skipping_busy_keys() -> TaskRecord | None:
            return claim_skipping_busy_keys(attempt, is_duplicate_key, conn.rollback)

        with wrap_driver_errors("claim"):
            return retry_on_lock_errors("claim", skipping_busy_keys, conn.rollback)

    # -- maintenance locks and orphans --

    def try_service_lock(self, conn: Any, key: int) -> bool:
        with wrap_driver_errors("try_service_lock"), conn.cursor() as cur:
            cur.execute(
                self.sql["try_service_lock"]["sql"], {"name": self.service_lock_name(conn, key)}
            )
            return bool(cur.fetchone()[0] == 1)

    def service_unlock(self, conn: Any, key: int) -> None:
        self._run(conn, "service_unlock", {"name": self.service_lock_name(conn, key)})

    def find_orphans(self, conn: Any, limit: int, check_session_locks: bool) -> list[TaskRecord]:
        """'processando' rows nobody is settling, row-locked until the transaction ends.

        Without ``check_session_locks`` only the row locks are considered and
        the caller asks the socket server about the liveness locks.
        """
        steps = self.sql["find_orphans"]
        params = {
            "lock_prefix": self.lock_prefix(conn),
            "limit": limit,
            "check_db_locks": check_session_locks,
        }
        with wrap_driver_errors("find_orphans"), conn.cursor() as cur:
            cur.execute(steps["candidates"], params)
            ids = [row[0] for row in cur.fetchall()]
            if not ids:
                return []
            cur.execute(steps["lock"], dict(params, ids=ids))
            ids = [row[0] for row in cur.fetchall()]
            if not ids:
                return []
            cur.execute(steps["rows"], {"ids": ids})
            return [TaskRecord.from_row(row) for row in rows_as_dicts(cur)]


_T = TypeVar("_T")


def _claims_of_batch(conn: Any, result: Result) -> list[Claim]:
    """A batch CALL's tasks, decoded; with none, ``conn``'s empty transaction ends."""
    if result.names == ("task_rows",):  # claimed set-based, as its locking read built them
        return claims_from_batch_document(result.rows[0][0])
    if result.names == ("task_row",):  # claimed set-based, read again: one JSON array per task
        return claims_from_task_rows([document for (document,) in result.rows])
    documents = [document for (document,) in result.rows if document is not None]
    if not documents:
        conn.rollback()  # the empty transaction opened for the tasks
        return []
    # Claimed one by one: one row, a JSON array of the tasks' objects.
    return [
        _claim_of_object(task_from_object(item))
        for document in documents
        for item in json.loads(document)
    ]


def _claim_of_object(row: dict[str, Any]) -> Claim:
    """A task claimed as a JSON object (``task_from_object``), its GET_LOCK result in it."""
    locked = row.pop("liveness_locked") == 1
    return Claim(TaskRecord.from_row(row), locked)


def _retried_claim(conn: Any, attempt: Callable[[], _T]) -> _T:
    """``attempt`` (a claim), retried after deadlocks and lock wait timeouts; rolled back when
    it fails for good."""
    with wrap_driver_errors("claim"):
        try:
            return retry_on_lock_errors("claim", attempt, conn.rollback)
        except BaseException:
            with suppress(Exception):  # the connection may be gone; its locks with it
                conn.rollback()
            raise
