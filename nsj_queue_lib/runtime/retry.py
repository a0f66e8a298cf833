"""Retry service: rescues attempts whose worker died mid-run.

A 'processando' row with no liveness lock and no row lock has no live worker
(killed, out of memory, lost its connection). It is settled as
'falha_processando' and its next attempt is due at once, as for an attempt
released at shutdown: the infrastructure failed, not the handler, so it
waits for no back-off (the attempt still counts toward the maximum, and the
last one is dead-lettered). The executor settles the same way an attempt
whose connection died under its handler; whichever of the two comes first
settles it (the update is conditional on 'processando'). When its cancel was
requested it ends 'cancelada' instead (it never runs again).

A suspect is rescued only when a second look, in a new transaction a moment
later, finds it still without a live worker (``_confirmed``); should a live
attempt be rescued anyway, the fence at its settle rolls its work back
(docs/group-commit.md, "Exactly once: the fence").


In compatibility mode (QUEUE_COMPAT_1_2_2) a row is an orphan only if its
nsj-queue-lib 1.2.2 key is free too: this service takes that key before
settling the row and keeps it until the settlement committed, so a 1.2.2
worker's running task is left alone and 1.2.2's retry thread cannot rescue
the same row at the same time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nsj_queue_lib import model
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.observability.observer import NULL_OBSERVER, RESCUED, Observer
from nsj_queue_lib.retry_policy import RetryPolicies
from nsj_queue_lib.runtime.failures import settle_failure
from nsj_queue_lib.runtime.liveness import LegacyKeys, task_lock_name
from nsj_queue_lib.runtime.service import PeriodicService

if TYPE_CHECKING:
    from nsj_queue_lib.client.lock_client import LockClient

logger = get_logger("retry")

BATCH = 100
# Between the two looks at a suspect attempt (RetryService._confirmed).
CONFIRM_SECONDS = 0.25
ORPHAN_MESSAGE = "the worker running this attempt died or lost its database connection"


class RetryService(PeriodicService):
    name = "retry"

    def __init__(
        self,
        *args: Any,
        lock_client: LockClient | None = None,
        policies: RetryPolicies | None = None,
        observer: Observer = NULL_OBSERVER,
        legacy_keys: LegacyKeys | None = None,
        on_rescued: Callable[[], None] = lambda: None,
        abandoned: Callable[[Any], int] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        # QUEUE_ONE_WRITE's groups left by a dead worker: their tasks written 'processando'
        # for the rescue below (db/postgres/held_groups.py).
        self.abandoned = abandoned
        self.policies = policies if policies is not None else RetryPolicies.build(self.settings)
        self.observer = observer
        # CLIENT_SERVER_MODE: the liveness locks live in the socket server.
        self.lock_client = lock_client
        self.rescued_total = 0  # attempts this worker rescued since the start
        # QUEUE_COMPAT_1_2_2: 1.2.2's running tasks are left alone.
        self.legacy_keys = legacy_keys
        # After a rescue: a slot of a processo with max_concurrent may be free (limited.py).
        self.on_rescued = on_rescued

    def work(self, conn: Any) -> int:
        conn.commit()
        if self.abandoned is not None and self.lock_client is None and self.abandoned(conn):
            conn.commit()
        suspects: set[int] = set()
        if self.lock_client is not None:
            suspects = self._server_suspects(conn)
            if not suspects:
                return 0
        rescued = 0
        while not self.stop.is_set():
            held: list[int] = []
            if self.lock_client is None:
                found = self.store.find_orphans(conn, BATCH, check_session_locks=True)
                batch_full = len(found) == BATCH
                found = self._confirmed(conn, found)
                orphans, held = self._free_of_1_2_2(conn, found)
                # A batch of 1.2.2's running tasks only would come back unchanged.
                batch_full = batch_full and bool(orphans)
            else:
                candidates = self.store.find_orphans(conn, BATCH, check_session_locks=False)
                free = self._free_on_server(candidates)
                orphans = [t for t in free if t.id in suspects]
                batch_full = False  # one confirmed batch per run; the next run takes the rest
            for task in orphans:
                settle_failure(
                    self.store,
                    conn,
                    self.policies,
                    task,
                    ORPHAN_MESSAGE,
                    status=model.FALHA_PROCESSANDO,
                    delay_seconds=0.0,
                )
                logger.warning(
                    "queue=%s task=%s tentativa=%s: rescued an abandoned attempt",
                    self.settings.queue_name,
                    task.id,
                    task.tentativa,
                )
            conn.commit()
            for task in orphans:
                self.observer.task_finished(task, RESCUED)
            if held:
                self._release_1_2_2(conn, held)
            rescued += len(orphans)
            self.rescued_total += len(orphans)
            if orphans:
                self.on_rescued()
            if not batch_full:
                break
        return rescued

    def _confirmed(self, conn: Any, found: list[TaskRecord]) -> list[TaskRecord]:
        """The rows of ``found`` still without a live worker at a second look, in a new
        transaction ``CONFIRM_SECONDS`` later, row-locked.

        One look reads each row, its liveness lock and its holder's state at slightly
        different moments (PostgreSQL's pg_stat_activity is a snapshot taken once per
        transaction), and under a busy drain a live attempt was seen as abandoned now and
        then (issue 36). A live attempt is not seen so twice; the fence keeps a rescue that
        gets through anyway from committing anything twice."""
        if not found:
            return found
        first = {task.id for task in found}
        conn.rollback()  # its row locks go while waiting, its snapshots with them
        if self.stop.wait(CONFIRM_SECONDS):
            return []
        again = self.store.find_orphans(conn, BATCH, check_session_locks=True)
        return [task for task in again if task.id in first]

    def _free_of_1_2_2(
        self, conn: Any, found: list[TaskRecord]
    ) -> tuple[list[TaskRecord], list[int]]:
        """(the rows no 1.2.2 worker runs, the 1.2.2 keys taken for them)."""
        if self.legacy_keys is None:
            return found, []
        held = self.legacy_keys.hold(conn, [t.id for t in found])
        return [t for t in found if t.id in held], sorted(held)

    def _release_1_2_2(self, conn: Any, held: list[int]) -> None:
        assert self.legacy_keys is not None
        self.legacy_keys.release(conn, held)
        conn.commit()

    def _free_on_server(self, candidates: list[TaskRecord]) -> list[TaskRecord]:
        """The candidates whose liveness lock nobody holds on the socket server."""
        assert self.lock_client is not None
        number = self.store.queue_number
        held = self.lock_client.held(task_lock_name(number, t.id) for t in candidates)
        return [t for t in candidates if task_lock_name(number, t.id) not in held]

    def _server_suspects(self, conn: Any) -> set[int]:
        """Tasks whose server lock is free twice, a grace period apart.

        Right after a socket server restart every lock is free until the
        workers reconnect (with back-off) and take theirs again; a single look
        would rescue tasks that are still running. The grace period covers
        that reconnection.
        """
        candidates = self.store.find_orphans(conn, BATCH, check_session_locks=False)
        conn.commit()  # no row stays locked while waiting
        suspects = {t.id for t in self._free_on_server(candidates)}
        if suspects and self.stop.wait(self.server_grace_seconds()):
            return set()
        return suspects

    def server_grace_seconds(self) -> float:
        return 2 * self.settings.timeout_socket_message + 1.0
