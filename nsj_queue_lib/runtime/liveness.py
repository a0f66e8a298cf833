"""Where a running task's liveness lock lives: the database, or the socket server.

The executor claims, completes and settles failures through one of these, so
its own code is the same in both modes.

- ``DatabaseLiveness``: the claim takes a session lock (advisory or named)
  on the executor's connection before the claim commits; completion, unlock,
  commit and the next claim travel in one round trip.
- ``CompatLiveness`` (QUEUE_COMPAT_1_2_2, PostgreSQL): as the database one,
  with nsj-queue-lib 1.2.2's key of each task held too, from before the claim
  commits until after the task's outcome committed (db/postgres/legacy_keys.py).
- ``ServerLiveness`` (CLIENT_SERVER_MODE): the claim's transaction stays open
  while the socket server's lock is taken, then commits: a claimed task is
  never visible without its lock. If the server connection drops, every lock
  of this worker is gone and another worker may rescue its tasks, so success
  is written only if the row is still 'processando'; otherwise the handler's
  work is rolled back (the rescuing attempt does it again).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from nsj_queue_lib.client.channel import ServerConnectionError
from nsj_queue_lib.db.task_session import Locks
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import Claim, TaskRecord

if TYPE_CHECKING:
    from nsj_queue_lib.client.lock_client import LockClient
    from nsj_queue_lib.db.queue_store import SessionLockStore
    from nsj_queue_lib.db.task_session import ClaimPhases

T = TypeVar("T")

logger = get_logger("liveness")


# Names are built from the queue's identity as the database resolves it (the
# table's oid on PostgreSQL, the qualified name's hash on MySQL), never from the
# QUEUE_TABLE text: 'fila' and 'public.fila' must be the same queue.


def task_lock_name(queue_oid: int, task_id: int) -> str:
    return f"nsjq:{queue_oid}:task:{task_id}"


def service_lock_name(queue_oid: int, service: str) -> str:
    return f"nsjq:{queue_oid}:service:{service}"


# How an executor claims, completes and settles, given where liveness locks live: what the
# task session is given (db/task_session.py).
Liveness = Locks


class LegacyKeys(Protocol):
    """A database's way of holding nsj-queue-lib 1.2.2's task keys next to ours."""

    def claim(self, conn: Any) -> Claim | None: ...

    def complete_and_claim(
        self, conn: Any, done_id: int, mensagem: str, claim_next: bool
    ) -> Claim | None: ...

    def unlock(self, conn: Any, task_id: int) -> None: ...

    def hold(self, conn: Any, ids: Sequence[int]) -> set[int]: ...

    def release(self, conn: Any, ids: Sequence[int]) -> None: ...


class DatabaseLiveness:
    def __init__(self, store: SessionLockStore):
        self.store = store

    def claim(self, conn: Any, claim_next: bool = True) -> Claim | None:
        return self.store.claim(conn) if claim_next else None

    def complete_and_claim(
        self, conn: Any, task: TaskRecord, mensagem: str, claim_next: bool
    ) -> Claim | None:
        return self.store.complete_and_claim(conn, task.id, mensagem, claim_next, task.first_id)

    def unlock_in_transaction(self, conn: Any, task: TaskRecord) -> None:
        self.store.unlock_task(conn, task.id)

    def after_settled(self, task: TaskRecord, conn: Any = None) -> None:
        pass

    # Awaitable forms, where the store has them (PostgreSQL: the same round trips,
    # the event loop waiting on the socket); the async executor uses them.

    @property
    def awaitable(self) -> bool:
        return hasattr(self.store, "complete_and_claim_async")

    async def claim_async(self, conn: Any, claim_next: bool = True) -> Claim | None:
        store: Any = self.store
        return await store.claim_async(conn) if claim_next else None

    async def complete_and_claim_async(
        self, conn: Any, task: TaskRecord, mensagem: str, claim_next: bool
    ) -> Claim | None:
        store: Any = self.store
        return await store.complete_and_claim_async(
            conn, task.id, mensagem, claim_next, task.first_id
        )


class CompatLiveness:
    """Database liveness locks plus 1.2.2's key of each task (QUEUE_COMPAT_1_2_2).

    Two round trips per task instead of one (docs/upgrading.md gives the cost):
    the 1.2.2 key of the claimed task is taken after the claim function ran and
    before the commit.
    """

    def __init__(self, keys: LegacyKeys):
        self.keys = keys

    def claim(self, conn: Any, claim_next: bool = True) -> Claim | None:
        return self.keys.claim(conn) if claim_next else None

    def complete_and_claim(
        self, conn: Any, task: TaskRecord, mensagem: str, claim_next: bool
    ) -> Claim | None:
        return self.keys.complete_and_claim(conn, task.id, mensagem, claim_next)

    def unlock_in_transaction(self, conn: Any, task: TaskRecord) -> None:
        pass  # both keys go after the commit, in after_settled

    def after_settled(self, task: TaskRecord, conn: Any = None) -> None:
        if conn is None:
            return  # the connection broke: its locks went with it
        try:
            self.keys.unlock(conn, task.id)
        except Exception as exc:  # noqa: BLE001 - a broken connection released them anyway
            logger.info("task=%s: releasing its keys failed (%s)", task.id, exc)


class ServerLiveness:
    def __init__(self, phases: ClaimPhases, lock_client: LockClient, stop: threading.Event):
        self.phases = phases
        self.locks = lock_client
        self._stop = stop

    def _name(self, task_id: int) -> str:
        return task_lock_name(self.phases.queue_number, task_id)

    def _call(self, operation: Callable[[], T]) -> T:
        """Run a lock-server call, reconnecting once if the connection dropped.

        The lock client takes its locks again when it reconnects, so running
        tasks keep theirs across a server restart.
        """
        try:
            return operation()
        except ServerConnectionError as exc:
            logger.warning("lock server connection lost (%s); reconnecting", exc)
            if not self.locks.reconnect(stop=self._stop, max_wait=30):
                raise
            return operation()

    def claim(self, conn: Any, claim_next: bool = True) -> Claim | None:
        if not claim_next:
            return None
        task = self.phases.claim(conn)
        if task is None:
            return None
        name = self._name(task.id)
        try:
            if not self._call(lambda: self.locks.try_lock(name)):
                raise RuntimeError(f"task {task.id}: its liveness lock is held by another client")
            self.phases.keep(conn)
        except Exception:
            # Nothing was committed: the task is 'pendente' again for everyone.
            self.phases.drop(conn)
            self.after_settled(task)
            raise
        return Claim(task, liveness_locked=True)

    def complete_and_claim(
        self, conn: Any, task: TaskRecord, mensagem: str, claim_next: bool
    ) -> Claim | None:
        if not self.phases.complete_fenced(conn, task.id, mensagem, task.first_id):
            logger.warning(
                "task=%s: no longer 'processando' when it finished (rescued by another worker, or "
                "given back after a deadlock); its work was rolled back",
                task.id,
            )
        self.after_settled(task)
        return self.claim(conn, claim_next)

    def unlock_in_transaction(self, conn: Any, task: TaskRecord) -> None:
        pass  # the server lock goes after the commit, in after_settled

    def after_settled(self, task: TaskRecord, conn: Any = None) -> None:
        try:
            self._call(lambda: self.locks.unlock(self._name(task.id)))
        except Exception as exc:  # noqa: BLE001 - a lost connection released it anyway
            logger.info("task=%s: unlock on the lock server failed (%s)", task.id, exc)
