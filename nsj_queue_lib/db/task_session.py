"""A worker's task session: what the runtime does to its tasks, as transactions.

The runtime speaks of tasks: claim them, complete one and claim the next,
write a failure, give a task back; for a commit group, get ready for the next
handler, undo a failed handler, settle the group and claim the next. This
module and ``db/<dialect>/session.py`` turn those into the database's
transactions: the runtime never opens, commits or rolls one back, and never
sets a savepoint (``tests/unit/test_architecture.py`` holds it to that).

- ``TaskSession``: one worker's session over its store and ``locks`` (where
  the tasks' liveness locks live: ``runtime/liveness.py``). Each call takes
  the connection it works on: a drain replaces a broken connection in the
  middle of a group, and the session goes on with the new one.
- ``ClaimPhases``: a claim whose liveness lock is taken outside the database
  (the socket server; 1.2.2's keys for a limited claim): the claim's
  transaction stays open until that lock is held.
- ``FailureRecord`` and ``write_failure``: a failed attempt as it is written,
  decided beforehand by the runtime (``runtime/failures.py``).

Where 'sucesso' is written: the claim routine's completion of one task, and
one statement for many (a commit group's end, a completion under an outside
lock, a lost group's recovery): two writers per dialect, each with the same
fence (the row must still be 'processando').
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from nsj_queue_lib import model
from nsj_queue_lib.exceptions import AttemptFenced, DatabaseError
from nsj_queue_lib.model import Claim, TaskRecord
from nsj_queue_lib.process import corruption as processes
from nsj_queue_lib.process.batch import write_saves
from nsj_queue_lib.workflow import dependencies

SAVEPOINT = "nsjq_group"

# How a failed attempt ends (FailureRecord.kind).
RETRY = "retry"  # 'falha' (or 'falha_processando') and its next attempt
BURY = "bury"  # failed for good, its dead-letter task enqueued
FINAL = "final"  # failed for good, nothing follows
CANCELLED = "cancelled"  # its handler stopped on a cancel request: 'cancelada'

# What became of a claimed task given back (``TaskSession.give_back_claimed``).
RELEASED = "released"  # 'pendente' again
CANCELADA = "cancelada"  # its cancel was requested meanwhile: it ends here
GONE = "gone"  # no longer 'processando' (settled elsewhere)


class GroupLost(Exception):
    """The group's transaction ended under it (a deadlock rolled it back): every success
    written since the group's last commit is gone."""


class GroupState(Protocol):
    """What a dialect may remember about the open group (``tx``: its own token), its
    successes since its last commit (``written``), and what its process tasks share
    (``processes``: a ``process/batch.py`` ProcessBatch where the dialect defers their
    writes to the group's commit, else None)."""

    tx: Any
    written: list[tuple[TaskRecord, str]]
    processes: Any
    waiting: Any  # its claimed tasks not started yet (a deque of Claims)


class Locks(Protocol):
    """Where the tasks' liveness locks live (``runtime/liveness.py``)."""

    def claim(self, conn: Any, claim_next: bool = True) -> Claim | None: ...

    def complete_and_claim(
        self, conn: Any, task: TaskRecord, mensagem: str, claim_next: bool
    ) -> Claim | None: ...

    def unlock_in_transaction(self, conn: Any, task: TaskRecord) -> None: ...

    def after_settled(self, task: TaskRecord, conn: Any = None) -> None: ...


@dataclasses.dataclass(frozen=True)
class FailureRecord:
    """A failed attempt as written: ``kind`` (RETRY, BURY, FINAL, CANCELLED), its status
    and ``mensagem``; the delay of its next attempt; the payload its dead letter carries."""

    kind: str
    status: str
    mensagem: str
    delay_seconds: float = 0.0
    payload: str | None = None
    counted: bool = True  # False: the next attempt keeps the tentativa (a held attempt)


def write_failure(
    store: Any,
    conn: Any,
    task_id: int,
    record: FailureRecord,
    row: Mapping[str, Any] | None = None,
) -> int | None:
    """Write ``record`` in ``conn``'s open transaction; the id of the row enqueued after it
    (its next attempt or its dead letter), or None.

    An attempt whose cancel was requested ends 'cancelada' whatever its handler did:
    cancel_task told its caller it would stop. Every write is conditional on the row
    still being 'processando', so two workers never both settle one attempt. A task of a
    process (``row``: the claimed row) that failed for good corrupts it
    (nsj_queue_lib/process/running.py)."""
    if record.kind == CANCELLED:
        if store.cancel_running(conn, task_id, record.mensagem):
            dependencies.after_failure(store, conn, task_id)
        return None
    if store.cancel_if_requested(conn, task_id, model.CANCELLED_WHILE_RUNNING):
        dependencies.after_failure(store, conn, task_id)
        return None
    if record.kind == RETRY:
        next_id: int | None = store.fail_and_retry(
            conn, task_id, record.status, record.mensagem, record.delay_seconds, record.counted
        )
        return next_id
    if record.kind == BURY:
        dead: int | None = store.fail_and_bury(
            conn, task_id, record.status, record.mensagem, record.payload
        )
        written = dead is not None
    else:
        dead = None
        written = bool(store.fail_final(conn, task_id, record.status, record.mensagem))
    if written:
        # Failed for good: the children waiting for it are cancelled (or run), in this
        # transaction (nsj_queue_lib/workflow/dependencies.py). Not when the fenced
        # write changed nothing: the attempt was settled elsewhere (the retry service
        # rescued it and its next attempt may still succeed).
        dependencies.after_failure(store, conn, task_id)
        if row is not None:
            processes.after_failure(store, conn, row, task_id, record.mensagem)
    return dead


def _roll_back_quietly(store: Any, conn: Any) -> None:
    try:
        store.rollback(conn)
    except Exception:  # noqa: BLE001 - a broken connection rolled back already
        pass


class ClaimPhases:
    """A claim in two phases, for a liveness lock taken outside the database: ``claim``
    leaves the claim's transaction open (nobody sees the task claimed yet), the caller
    takes the lock, then ``keep`` commits the claim (the task's own transaction opens in
    the same round trip) or ``drop`` undoes it (the task is 'pendente' for everyone)."""

    def __init__(self, store: Any):
        self.store = store

    @property
    def queue_number(self) -> int:
        number: int = self.store.queue_number
        return number

    def claim(self, conn: Any) -> TaskRecord | None:
        task: TaskRecord | None = self.store.claim_uncommitted(conn)
        return task

    def keep(self, conn: Any) -> None:
        self.store.commit_and_begin(conn)

    def drop(self, conn: Any) -> None:
        _roll_back_quietly(self.store, conn)

    def complete_fenced(
        self, conn: Any, task_id: int, mensagem: str, first_id: int | None = None
    ) -> bool:
        """'sucesso' with the handler's writes, committed; False (all of it undone) when the
        row is no longer 'processando': another worker rescued the task while its lock was
        lost, and runs it again."""
        if self.store.complete_if_running(conn, task_id, mensagem, first_id):
            self.store.commit(conn)
            return True
        self.store.rollback(conn)
        return False


class TaskSession:
    """One worker's task operations (see the module's docstring). A dialect with savepoints
    adds a commit group's (``groups``)."""

    groups: ClassVar[bool] = False

    def __init__(self, store: Any, locks: Locks):
        self.store = store
        self.locks = locks

    # -- one task --

    def claim(self, conn: Any, claim_next: bool = True) -> Claim | None:
        """The next ready task, its liveness lock held, the claim committed; its own
        transaction is open on ``conn`` (None: nothing was ready, ``conn`` is idle)."""
        return self.locks.claim(conn, claim_next)

    def complete_and_claim(
        self, conn: Any, task: TaskRecord, mensagem: str, claim_next: bool
    ) -> Claim | None:
        """'sucesso' committed with the handler's writes, then (``claim_next``) the next
        claim. Raises ``AttemptFenced`` when another worker rescued the task meanwhile
        (nothing committed)."""
        return self.locks.complete_and_claim(conn, task, mensagem, claim_next)

    def after_settled(self, task: TaskRecord, conn: Any = None) -> None:
        """The task's outcome is committed (on ``conn``, when it is still usable)."""
        self.locks.after_settled(task, conn)

    def handler_transaction_open(self, conn: Any) -> bool:
        """Whether the task's transaction is still open on ``conn`` (a handler that
        committed or rolled back ``bd_conn`` ended it)."""
        open_: bool = self.store.in_transaction(conn)
        return open_

    def fail(self, conn: Any, task: TaskRecord, record: FailureRecord) -> None:
        """The handler's writes undone, ``record`` written and the liveness lock freed, all
        committed, in a transaction that opens as the handler's ends (PostgreSQL's retry
        service reads a lock held by an idle session as left behind)."""
        self.store.rollback_and_begin(conn)
        self.record_failure(conn, task, record)
        self.store.commit(conn)

    def record_failure(self, conn: Any, task: TaskRecord, record: FailureRecord) -> None:
        """``record`` written and the liveness lock freed in the open transaction (a commit
        group's: it commits with the group)."""
        write_failure(self.store, conn, task.id, record, task.row)
        self.locks.unlock_in_transaction(conn, task)

    def fail_elsewhere(self, conn: Any, task: TaskRecord, record: FailureRecord) -> int | None:
        """``record`` written and committed on a connection that holds nothing of the task
        (a fresh one, or an administrator's after its session was ended); the id of the row
        enqueued after it, or None."""
        self.store.begin(conn)
        try:
            next_id = write_failure(self.store, conn, task.id, record, task.row)
            self.store.commit(conn)
        except BaseException:
            _roll_back_quietly(self.store, conn)
            raise
        return next_id

    def give_back_unstarted(self, conn: Any, task: TaskRecord) -> None:
        """A task whose transaction ended before its handler started: 'pendente' again, its
        liveness lock freed, committed (it never ran)."""
        self.store.begin(conn)
        self.store.release(conn, task.id)
        self.locks.unlock_in_transaction(conn, task)
        self.store.commit(conn)

    def give_back_claimed(self, conn: Any, task: TaskRecord, cancel_mensagem: str) -> str:
        """A claimed task whose attempt does not count: 'pendente' again in the open
        transaction (RELEASED), or 'cancelada' with ``cancel_mensagem`` when its cancel was
        requested meanwhile (CANCELADA: given back, it could start anywhere); GONE when it
        was neither. Its liveness lock is freed either way."""
        if self.store.cancel_if_requested(conn, task.id, cancel_mensagem):
            outcome = CANCELADA
            dependencies.after_failure(self.store, conn, task.id)
        else:
            outcome = RELEASED if self.store.release(conn, task.id) else GONE
        self.locks.unlock_in_transaction(conn, task)
        return outcome

    # -- a handler's own commits (durable steps and waits: runtime/handler_commits.py) --

    def keep_handler_work(self, conn: Any) -> None:
        """What the handler's transaction holds, committed; the next transaction opened in
        the same round trip (never idle while the session holds the task's liveness lock,
        which a commit keeps: it is a session lock)."""
        self.store.commit_and_begin(conn)

    def unlock_in_transaction(self, conn: Any, task: TaskRecord) -> None:
        """The task's liveness lock freed with the open transaction (where the lock is the
        database's; elsewhere after its commit, in ``after_settled``)."""
        self.locks.unlock_in_transaction(conn, task)

    def release_handler(self, conn: Any, task: TaskRecord) -> None:
        """The liveness lock freed and the handler's transaction committed (its task written
        'pendente' again in it: a durable wait); ``conn`` idle after it."""
        self.locks.unlock_in_transaction(conn, task)
        self.store.commit(conn)

    # -- a commit group (dialects with savepoints: db/<dialect>/session.py) --

    # Whether the group's commit writes its process tasks' saves (process/batch.py).
    process_batches: ClassVar[bool] = False

    # -- tasks a group holds unwritten (QUEUE_ONE_WRITE: db/postgres/held_session.py) --

    def close(self) -> None:
        """The worker stops: connections of the session's own closed (none here)."""

    def holds_rows(self, conn: Any) -> bool:
        """Whether ``conn``'s transaction holds claimed tasks it has not written: a rollback
        of the whole transaction would free them for any claim."""
        return False

    def write_held(self, conn: Any) -> None:
        """Every task ``conn``'s transaction holds unwritten written 'processando' (they go on
        after a commit in the middle of the group)."""

    def drop_held(self, conn: Any, group: GroupState | None = None) -> None:
        """``conn``'s transaction is gone: the tasks it held are free, and leave ``group``."""

    def claim_group(self, conn: Any, limit: int) -> list[Claim]:
        """Up to ``limit`` tasks, their liveness locks taken, the claim committed; the
        group's transaction is open on return when any was claimed, else ``conn`` is idle."""
        raise NotImplementedError("commit groups need savepoints")

    def succeeded(self, conn: Any, task: TaskRecord, mensagem: str) -> None:
        """A handler of the group returned: its success is written now, or with the group's
        end (which gets every success of the group). Raises ``GroupLost``."""
        raise NotImplementedError("commit groups need savepoints")

    def before_next_handler(self, conn: Any, group: GroupState) -> None:
        """Make the next handler's work undoable alone (``undo_handler``). Raises
        ``GroupLost`` when what the group wrote since its last commit is gone, or cannot be
        told apart."""
        raise NotImplementedError("commit groups need savepoints")

    def undo_handler(self, conn: Any) -> None:
        """Undo what the handler sent since ``before_next_handler`` (nothing to do when it
        sent nothing)."""
        raise NotImplementedError("commit groups need savepoints")

    def undo_group(self, conn: Any) -> None:
        """Undo everything of the group's open transaction; the group goes on in a new one."""
        self.store.rollback_and_begin(conn)

    def resume_group(self, conn: Any) -> None:
        """The group's transaction is open on ``conn`` (a replacement connection, or one
        whose transaction ended under the group, opens a new one)."""
        if not self.store.in_transaction(conn):
            self.store.begin(conn)

    def settle_group(
        self, conn: Any, group: GroupState, claim_limit: int, go_on: bool = False
    ) -> list[Claim]:
        """The group's successes written (what ``succeeded`` left), their liveness locks
        freed, committed with everything the group's transaction holds; then up to
        ``claim_limit`` tasks claimed as ``claim_group`` does. ``go_on``: the group goes on
        with its claimed tasks in a new transaction, opened with the commit where the
        dialect can (the session is never idle while it holds their liveness locks).

        The fence: raises ``AttemptFenced`` (nothing committed, the handlers' writes
        undone) when a task of ``group.written`` is no longer 'processando': another
        worker rescued it and runs it again."""
        claims = self._end_group(conn, group, claim_limit, go_on)
        if go_on:
            self.resume_group(conn)
        return claims

    def _end_group(
        self, conn: Any, group: GroupState, claim_limit: int, go_on: bool
    ) -> list[Claim]:
        raise NotImplementedError("commit groups need savepoints")

    def group_ended(self, conn: Any, group: GroupState) -> bool | None:
        """After the transaction ended under the group (or must be abandoned): whether it
        committed (None: the dialect cannot tell; the tasks' rows say), its remains rolled
        back."""
        try:
            committed = self._transaction_committed(conn, group)
        except DatabaseError:
            committed = None
        try:
            self.store.rollback(conn)  # the server may still hold an aborted transaction
        except DatabaseError:
            pass
        return committed

    def _transaction_committed(self, conn: Any, group: GroupState) -> bool | None:
        return None

    def settle_lost(
        self,
        conn: Any,
        tasks: Sequence[tuple[TaskRecord, str | None]],
        failures: Sequence[tuple[TaskRecord, FailureRecord]],
        committed: bool | None,
        process_saves: Mapping[int, Any] | None = None,
    ) -> tuple[list[TaskRecord], list[TaskRecord]]:
        """Settle a group's tasks after its transaction was lost (``committed``: whether it
        committed, None: unknown), in a transaction of its own: a failure whose record was
        lost is written again; a finished task whose success was committed counts as done
        (its 'sucesso' written now if the group's end was to write it); every other task is
        'pendente' again (its work was rolled back: as far as the queue is concerned its
        attempt never ran). (the tasks done, the tasks given back). A success written here
        also gets its process's write the group's commit was to send (``process_saves``, by
        attempt id: process/batch.py). On any error nothing of it is kept and the error is
        raised (a deadlock is worth another try)."""
        store = self.store
        store.begin(conn)
        done: list[TaskRecord] = []
        given_back: list[TaskRecord] = []
        try:
            for task, record in failures:
                if self._status(conn, task) == model.PROCESSANDO:
                    self.record_failure(conn, task, record)
            for task, mensagem in tasks:
                if mensagem is not None and committed is not False:
                    status = self._status(conn, task)
                    if committed is True and status == model.PROCESSANDO:
                        save = (process_saves or {}).get(task.id)
                        if save is not None:
                            write_saves(store, conn, [save])
                        self._complete_in_transaction(conn, task, mensagem)
                        self.locks.unlock_in_transaction(conn, task)
                        status = model.SUCESSO
                    if status == model.SUCESSO:
                        done.append(task)
                        continue
                cancel = (
                    model.CANCELLED_WHILE_RUNNING
                    if mensagem is not None
                    else model.CANCELLED_BEFORE_IT_RAN
                )
                if self.give_back_claimed(conn, task, cancel) == RELEASED:
                    given_back.append(task)
            store.commit(conn)
        except BaseException:
            _roll_back_quietly(store, conn)
            raise
        return done, given_back

    def _status(self, conn: Any, task: TaskRecord) -> str | None:
        row = self.store.get_task(conn, task.id)
        return None if row is None else str(row.get("status"))

    def _complete_in_transaction(self, conn: Any, task: TaskRecord, mensagem: str) -> None:
        """'sucesso' for a task read 'processando' in this transaction; ``AttemptFenced`` when
        it was rescued since (the caller's transaction is then undone)."""
        if not self.store.complete_if_running(conn, task.id, mensagem, task.first_id):
            raise AttemptFenced(f"task {task.id} is no longer 'processando'")
