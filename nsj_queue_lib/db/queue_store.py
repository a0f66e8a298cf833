"""What a dialect's store offers, in three protocols by who calls it.

- ``ClientStore``: the ``QueueClient`` and pub/sub fan-out, on the caller's
  connection, inside the caller's transaction.
- ``WorkerStore``: the statements of the executors, on autocommit worker
  connections whose transactions the store opens and ends with explicit
  statements, so that ``claim`` and ``complete_and_claim`` return with the
  claimed task's transaction open (or the connection idle when nothing was
  claimed). The runtime reaches them through its task session
  (``db/task_session.py``), which says when a transaction opens and ends.
  ``SessionLockStore`` adds what only databases with session locks do: the
  claim that takes the task's liveness lock in the database.
- ``MaintenanceStore``: the dispatcher and the periodic services.
- ``InspectionStore``: the ``nsjq`` command, on a connection of its own (reads,
  and the manual retry inside the caller's transaction).

``bind`` runs first on a worker: it resolves the queue's identity and checks
that the database has what this version needs. Driver errors leave a store
as ``DatabaseError`` with the driver's error as ``__cause__``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from nsj_queue_lib.model import Claim, TaskRecord

if TYPE_CHECKING:
    from nsj_queue_lib.db.inspection import TaskFilter
    from nsj_queue_lib.db.tally import FoldResult

Row = dict[str, Any]


class EndWaiter(Protocol):
    """What pushes ``wait_for_task`` (workflow/waiting.py's ``wait_pushed``): PostgreSQL's
    LISTEN on the caller's connection (db/postgres/task_end.py)."""

    def end_look(self) -> None: ...

    def register(self, first_id: int) -> tuple[bool, Mapping[str, Any] | None]: ...

    def unregister(self) -> None: ...

    def wait(self, seconds: float) -> bool: ...

    def look_and_close(self) -> Mapping[str, Any] | None: ...

    def close(self) -> None: ...


@runtime_checkable
class StreamingClientStore(Protocol):
    """A client store that can check a bulk insert's items while the earlier ones travel."""

    def streams(self, conn: Any, count: int) -> bool: ...

    def stream_tasks(self, conn: Any, count: int, rows: Iterator[Row]) -> list[int]:
        """Insert ``count`` rows from ``rows``; when ``rows`` raises, nothing is written and the
        caller's transaction goes on."""
        ...


class ClientStore(Protocol):
    queue_table: str
    subscriber_table: str | None

    def insert_task(self, conn: Any, row: Row) -> int: ...

    def insert_tasks(self, conn: Any, rows: Sequence[Row]) -> list[int]: ...

    def list_equivalent(
        self,
        conn: Any,
        chave_externa: str | None,
        payload_hash: bytes | None,
        statuses: Sequence[str],
    ) -> list[Row]: ...

    def get_task(self, conn: Any, task_id: int) -> Row | None: ...

    def list_subscribers(
        self, conn: Any, processo: str, tenant: int | None, grupo_empresarial: str | None
    ) -> list[Row]: ...

    def task_view(self, conn: Any, task_id: int, lock: bool = False) -> Row | None:
        """The latest attempt of the task ``task_id`` (any attempt's id) belongs to: ``id``,
        ``id_inicial``, ``status``, ``tentativa``, ``mensagem``, ``reenfileirado`` and the
        life-cycle columns; with ``lock``, as locking reads see it."""
        ...

    def end_waiter(self, conn: Any, task_id: int) -> EndWaiter | None:
        """What pushes ``wait_for_task`` for the task on ``conn`` (workflow/waiting.py's
        ``EndWaiter``: PostgreSQL's LISTEN, db/postgres/task_end.py), or None where the
        wait polls (the dialect has no push, or ``conn`` cannot hear one now)."""
        ...

    def cancel_attempt(self, conn: Any, attempt_id: int, mensagem: str) -> str | None:
        """A waiting attempt becomes 'cancelada', a running one gets its cancel request; the
        status after, or None when the attempt was no longer waiting or running."""
        ...

    def notify_cancel(self, conn: Any, attempt_id: int) -> None:
        """Announce a cancel request at commit where the database can (PostgreSQL)."""
        ...

    def insert_deliveries(
        self,
        conn: Any,
        publication: Row,
        deliveries: Sequence[tuple[Any, str | None, bytes | None]],
    ) -> list[int]: ...


class WorkerStore(Protocol):
    queue_table: str

    def bind(self, conn: Any) -> int:
        """Check the queue table and its claim routine; the queue's number, kept for the
        operations below. Raises ``QueueTableMissingError`` or ``ClaimRoutineError``."""
        ...

    @property
    def queue_number(self) -> int: ...

    def set_handled_processos(self, handled: frozenset[str] | None) -> None:
        """The processos whose tasks the claims take (None: every processo)."""
        ...

    def set_handled_subscribers(self, handled: frozenset[str] | None) -> None:
        """Claim only the pub/sub deliveries of these subscribers (None: every delivery)."""
        ...

    def set_worker_name(self, worker: str | None) -> None:
        """The name the claims write in each attempt's ``worker`` column."""
        ...

    def begin(self, conn: Any) -> None: ...

    def commit(self, conn: Any) -> None: ...

    def rollback(self, conn: Any) -> None: ...

    def rollback_and_begin(self, conn: Any) -> None:
        """Roll back and open the next transaction with no moment outside one: PostgreSQL's
        retry service reads a liveness lock held by an idle session as left behind."""
        ...

    def in_transaction(self, conn: Any) -> bool:
        """Whether ``conn`` has a transaction open (a handler that committed or rolled back
        ``bd_conn`` ended the task's own)."""
        ...

    def claim_uncommitted(self, conn: Any) -> TaskRecord | None:
        """Claim one task without a database lock, leaving the claim's transaction open;
        the caller takes the liveness lock elsewhere, then ``commit_and_begin``."""
        ...

    def commit_and_begin(self, conn: Any) -> None: ...

    def complete_if_running(
        self, conn: Any, task_id: int, mensagem: str, first_id: int | None = None
    ) -> bool: ...

    def fail_and_retry(
        self,
        conn: Any,
        task_id: int,
        status: str,
        mensagem: str,
        delay_seconds: float,
        counted: bool = True,
    ) -> int | None:
        """The attempt failed; its next attempt (``counted``: with the next ``tentativa``,
        else the same: a held attempt) due after ``delay_seconds``; the new row's id."""
        ...

    def fail_and_bury(
        self, conn: Any, task_id: int, status: str, mensagem: str, payload: str | None
    ) -> int | None: ...

    def fail_final(self, conn: Any, task_id: int, status: str, mensagem: str) -> bool: ...

    def release(self, conn: Any, task_id: int) -> bool: ...

    def worker_seen(self, conn: Any, worker: str, processos: str | None) -> None:
        """This worker's row in the workers table (``processos``: a JSON array, None: every
        processo), in the caller's transaction."""
        ...

    def worker_left(self, conn: Any, worker: str) -> None: ...

    def cancel_running(self, conn: Any, task_id: int, mensagem: str) -> bool:
        """A running attempt whose handler stopped on a cancel becomes 'cancelada'."""
        ...

    def cancel_if_requested(self, conn: Any, task_id: int, mensagem: str) -> bool:
        """Lock a running attempt's row; when its cancel was requested, 'cancelada' (True)."""
        ...

    def cancel_requests(self, conn: Any, task_ids: Sequence[int]) -> list[int]:
        """Which of these running attempts have a cancel request."""
        ...

    def report_progress(
        self, conn: Any, task_id: int, done: int, total: int | None, message: str | None
    ) -> bool:
        """A running attempt's progress, outside its handler's transaction."""
        ...


class SessionLockStore(WorkerStore, Protocol):
    def claim(self, conn: Any) -> Claim | None:
        """Claim the next ready task and take its liveness lock on ``conn``, committed;
        the task's transaction is open on return."""
        ...

    def complete_and_claim(
        self,
        conn: Any,
        task_id: int,
        mensagem: str,
        claim_next: bool,
        first_id: int | None = None,
    ) -> Claim | None:
        """'sucesso' and the lock's release, committed; then, with ``claim_next``, the next
        claim as ``claim`` makes it. ``first_id``: as ``complete_if_running``'s."""
        ...

    def unlock_task(self, conn: Any, task_id: int) -> None: ...

    def try_service_lock(self, conn: Any, key: int) -> bool: ...

    def service_unlock(self, conn: Any, key: int) -> None: ...


@dataclasses.dataclass(frozen=True)
class TableHealth:
    """The queue table as the database's statistics see it: its dead row versions (0 where
    the database removes them itself: InnoDB's purge thread), its rows changed since its
    statistics were last calculated, and whether this session may VACUUM and ANALYZE it."""

    dead_rows: int
    changed_since_analyze: int
    may_maintain: bool


@dataclasses.dataclass(frozen=True)
class HotSpace:
    """The table of unfinished work alone (PostgreSQL's hot partition) as its statistics see
    it after a VACUUM (ANALYZE): its size on disk with its indexes, the bytes its live rows
    take (rows times their average width), and the dead row versions the vacuum had to
    leave (a snapshot older than them was still open)."""

    size_bytes: int
    live_bytes: int
    dead_rows: int


class MaintenanceStore(Protocol):
    queue_table: str
    # How long after a wake-up a claim may still say "nothing" while a task it missed
    # waits (the claim function's empty look-up position, PostgreSQL): the dispatcher
    # wakes the executors once more that long after the last notification. None: every
    # "nothing" comes from a look-up.
    claim_recheck_seconds: float | None

    def table_health(self, conn: Any) -> TableHealth | None:
        """The queue table's statistics; None where the database keeps them fresh by itself
        (SingleStore's automatic statistics)."""
        ...

    def vacuum(self, conn: Any) -> None:
        """VACUUM (ANALYZE) the queue table, skipped while another vacuum holds it; ``conn``
        autocommit. Called only past ``TableHealth.dead_rows``."""
        ...

    def analyze(self, conn: Any) -> None:
        """Calculate the queue table's statistics again (ANALYZE); ``conn`` autocommit."""
        ...

    def hot_space(self, conn: Any) -> HotSpace | None:
        """The table of unfinished work, where one holds nothing else (the partitioned
        layout on PostgreSQL); None elsewhere: no table the vacuum service may rewrite."""
        ...

    def compact_hot(self, conn: Any, lock_timeout_ms: int) -> bool:
        """Rewrite the table of ``hot_space`` to the size of its rows (VACUUM FULL), unless
        its exclusive lock is not granted within ``lock_timeout_ms``: False then; ``conn``
        autocommit."""
        ...

    def seconds_until_next_due(self, conn: Any) -> float | None: ...

    def promote_due(self, conn: Any, limit: int) -> int: ...

    def has_stale_pending(self, conn: Any, wait_seconds: float) -> bool: ...

    def notify(self, conn: Any, channel: str, payload: str = "") -> None: ...

    def find_orphans(self, conn: Any, limit: int, check_session_locks: bool) -> list[TaskRecord]:
        """'processando' rows nobody settles, row-locked until the transaction ends; without
        ``check_session_locks`` the caller asks the socket server about their locks."""
        ...

    def purge_round(self, conn: Any, max_age_days: int, limit: int, sides: Any = None) -> int:
        """One bounded round of the purge; the rows deleted. ``sides`` (db/side_store.py
        ``SidePurge``, where the queue has side tables): told the tasks of the rows deleted,
        in the round's transaction, or each day partition's before it is dropped."""
        ...

    def fold_counts(self, conn: Any, max_age_days: int) -> FoldResult | None:
        """One fold of the counts nsjq status reads (db/tally.py), in ``conn``'s transaction;
        None where the queue has no tally tables (SingleStore, a schema before
        db_gen --upgrade)."""
        ...


class QueueStore(ClientStore, WorkerStore, MaintenanceStore, Protocol):
    """A store the socket-server path can run on (every dialect's)."""


class LockingQueueStore(QueueStore, SessionLockStore, Protocol):
    """A store of a database with session locks (PostgreSQL, MySQL)."""


class InspectionStore(Protocol):
    """What an operator sees of a queue (``nsjq``). Times are aware datetimes in UTC; ages
    and "the last 24 h" are measured by the database's clock."""

    queue_table: str

    def summary(self, conn: Any) -> list[Row]:
        """One row per (processo, status): ``tasks`` (latest attempts in that status),
        ``oldest_ready_seconds`` (age of the oldest ready 'pendente' task, else None),
        ``failed_24h`` (failed attempts due in the last 24 h) and ``dead_24h`` (dead
        letters enqueued in the last 24 h)."""
        ...

    def depth(self, conn: Any) -> list[Row]:
        """One row per (processo, status) of the tasks with work ahead ('pendente',
        'agendada', 'processando'): ``tasks`` (attempts in that status) and, for
        'pendente', ``oldest_ready_seconds`` (else None). Reads only those rows."""
        ...

    def recent(self, conn: Any) -> list[Row]:
        """The settled attempts due in the last hour (``RECENT_WINDOW``), one row per
        ``bucket`` (``RECENT_BUCKET`` seconds each, 0 the newest), ``processo``, ``status``
        and ``dead``: ``tasks``, and ``finished_recently`` (those that ended in the last
        ``RATE_WINDOW`` seconds). An attempt counts at its ``data_hora``, which the
        purge index orders (``finished_at`` has no index)."""
        ...

    def running_by_worker(self, conn: Any) -> dict[str | None, int]:
        """The 'processando' attempts per worker name (None: rows without one)."""
        ...

    def live_workers(self, conn: Any, seen_within: float) -> list[Row]:
        """The workers table's rows seen within ``seen_within`` seconds: ``worker``,
        ``processos`` (JSON text, None: every processo), ``started_at`` and ``seen_at`` as
        epoch seconds. ``DatabaseError`` where the table is missing."""
        ...

    def running(self, conn: Any, limit: int) -> list[Row]:
        """'processando' attempts as ``list_tasks`` gives them (the most recent first)."""
        ...

    def list_tasks(self, conn: Any, filters: TaskFilter, limit: int, offset: int) -> list[Row]:
        """Each task's latest attempt (every attempt with ``filters.all_attempts``) matching
        ``filters``, the most recent attempt first (the primary key read backwards, so a
        page stops early), each with ``age_seconds``: the time since its data_hora."""
        ...

    def task_chain(self, conn: Any, task_id: int) -> list[Row]:
        """Every attempt of the task ``task_id`` belongs to, and of its dead letter, by id
        (the first attempt with its payload); empty when there is no such row."""
        ...

    def task_attempts(self, conn: Any, task_id: int) -> list[Row]:
        """``task_chain`` without the dead letter, read by indexes only (its cost does not
        grow with the table)."""
        ...

    def retry_task(self, conn: Any, task_id: int) -> int | None:
        """A new 'pendente' attempt, due now, after the latest attempt of the task when that
        one ran out of attempts; its id, or None (nothing to retry). In the caller's
        transaction."""
        ...
