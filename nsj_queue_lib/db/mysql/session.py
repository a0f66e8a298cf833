"""The task session on MySQL/MariaDB: one task at a time, or a commit group (InnoDB
savepoints).

One task at a time, the session is ``TaskSession``'s over the store's claim
procedure (one CALL completes a task, commits and claims the next).

A group's tasks are claimed by one CALL of the claim procedure with
@nsjq_claim_limit set: up to QUEUE_BATCH_SIZE tasks in one transaction and
one commit, before the first handler runs, so that commit never carries a
handler's work.

MariaDB spends more CPU on running a statement than on the rows it touches
(docs/benchmarks.md), so the group sends as few as it can. Per task, at most
one short round trip: the savepoint the next handler rolls back to, sent only
before the handler's first statement (first_use.py); a handler that sends
none costs none. The group's successes are written in one UPDATE at its end
(successes.py),
their liveness locks released in one statement, then the commit.

Because most successes are written only at the end, a handler that commits
or rolls back ``bd_conn`` would leave the group unable to tell whether the
earlier tasks' writes were kept (MariaDB has no transaction status to ask,
as PostgreSQL's ``pg_xact_status``). So the first savepoint of each
transaction also writes the successes before it (usually the transaction's
first task): that row, read after the transaction ended under the group,
says whether it committed (``transaction_committed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from nsj_queue_lib.db import first_use
from nsj_queue_lib.db.mysql import first_use as mysql_first_use
from nsj_queue_lib.db.mysql.errors import wrap_driver_errors
from nsj_queue_lib.db.mysql.store import MysqlQueueStore
from nsj_queue_lib.db.mysql.successes import success_sql
from nsj_queue_lib.db.task_session import SAVEPOINT, GroupLost, GroupState, Locks, TaskSession
from nsj_queue_lib.exceptions import AttemptFenced, DatabaseError
from nsj_queue_lib.model import SUCESSO, Claim, TaskRecord
from nsj_queue_lib.workflow import dependencies


class MysqlTaskSession(TaskSession):
    groups: ClassVar[bool] = True

    def __init__(self, store: MysqlQueueStore, locks: Locks):
        super().__init__(store, locks)
        self.store: MysqlQueueStore = store

    def claim_group(self, conn: Any, limit: int, begun: bool = False) -> list[Claim]:
        """``begun`` (only with ``limit`` > 1, the set-based claim): the commit before it
        opened the claim's transaction (COMMIT AND CHAIN)."""
        first_use.disarm(conn)  # whatever an earlier drain left armed (an unexpected error) goes
        if limit > 1:
            return self.store.claim_many(conn, limit, begun)
        claims: list[Claim] = []
        while len(claims) < limit:
            claimed = self.store.claim(conn)  # commits (and chains) its claim
            if claimed is None:
                break
            claims.append(claimed)
        if claims and not self.store.in_transaction(conn):
            self.store.begin(conn)  # the last CALL found nothing and left conn idle
        return claims

    def succeeded(self, conn: Any, task: TaskRecord, mensagem: str) -> None:
        # Written by the transaction's first savepoint, or with the group's commit. When
        # that first savepoint, set before this handler's first statement, found the
        # group's transaction gone, the handler's statements ran in a new one: the group
        # is lost, this task with it.
        if first_use.disarm(conn) == first_use.FAILED:
            error = conn.first_use_error
            if isinstance(error, GroupLost):
                raise error

    def before_next_handler(self, conn: Any, group: GroupState) -> None:
        # Should the hook fail (GroupLost included), the handler's statement goes on and
        # the connection says FAILED: succeeded() and undo_handler() tell.
        first_use.arm_savepoint(
            conn, lambda: self._set_savepoint(conn, group), mysql_first_use.hook_fires
        )

    def _set_savepoint(self, conn: Any, group: GroupState) -> None:
        if group.tx is None:
            written = list(group.written)
            if written:
                # The transaction's marker: its first successes, written now. Without it
                # the group could not tell its commit from its rollback: it is lost.
                try:
                    self._write_successes(conn, written, len(written))
                except DatabaseError as exc:
                    raise GroupLost(f"writing the group's first successes failed: {exc}") from exc
                # (the marker task, how many successes this write settled)
                group.tx = (written[0][0].id, len(written))
        self._execute(conn, "savepoint", f"SAVEPOINT {SAVEPOINT}")

    def undo_handler(self, conn: Any) -> None:
        if first_use.savepoint_to_roll_back(conn):
            self._execute(conn, "rollback to savepoint", f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")

    def _end_group(
        self, conn: Any, group: GroupState, claim_limit: int, go_on: bool
    ) -> list[Claim]:
        written = group.written
        if written:
            # Those the first savepoint wrote are 'sucesso' already: the UPDATE skips them.
            early = group.tx[1] if group.tx is not None else 0
            self._write_successes(conn, written, len(written) - early)
            # Their children, released in this commit (nsj_queue_lib/workflow/).
            dependencies.after_successes(
                self.store, conn, first_ids=[task.first_id for task, _ in written]
            )
            self._release_locks(conn, [task.id for task, _ in written])
        if claim_limit > 1:
            # The next claim's transaction opens with the commit: one round trip fewer.
            self.store.commit_and_begin(conn)
            return self.claim_group(conn, claim_limit, begun=True)
        self.store.commit(conn)
        return self.claim_group(conn, claim_limit) if claim_limit else []

    def _transaction_committed(self, conn: Any, group: GroupState) -> bool | None:
        if group.tx is None:
            return None  # no success was written before it ended: the rows say
        row = self.store.get_task(conn, int(group.tx[0]))
        return row is not None and row.get("status") == SUCESSO

    def _write_successes(
        self, conn: Any, written: Sequence[tuple[TaskRecord, str]], expected: int
    ) -> None:
        """'sucesso' and each task's mensagem, in one statement, for the tasks still running.

        The fence: fewer than ``expected`` rows changed means a task is no longer
        'processando' (another worker rescued it): ``AttemptFenced``, and the caller rolls
        the transaction back with its handlers' writes."""
        sql = success_sql(
            conn,
            self.store.queue_table,
            [(task.id, m) for task, m in written],
            self.store.partitioned,
        )
        with wrap_driver_errors("complete_tasks"), conn.cursor() as cur:
            changed = cur.execute(sql)
        if changed < expected:
            raise AttemptFenced(
                f"complete_tasks: {expected - changed} of tasks {[t.id for t, _ in written]} "
                "are no longer 'processando'"
            )

    def _release_locks(self, conn: Any, task_ids: list[int]) -> None:
        """The tasks' liveness locks, in one statement (named locks are not transactional:
        released before the commit, a task whose commit then fails is 'processando' without
        its lock, which the retry service rescues, as after a crash)."""
        # The names are the prefix and the id (store.task_lock_name): the prefix is escaped
        # once, left open, and each id, digits only, closes its own literal.
        open_prefix = conn.escape(self.store.lock_prefix(conn))[:-1]
        sql = "DO " + ", ".join(
            [f"RELEASE_LOCK({open_prefix}{int(task_id)}')" for task_id in task_ids]
        )
        with wrap_driver_errors("unlock_tasks"), conn.cursor() as cur:
            cur.execute(sql)

    def _execute(self, conn: Any, what: str, sql: str) -> None:
        with wrap_driver_errors(what), conn.cursor() as cur:
            cur.execute(sql)
