"""Per-processo limits in a worker: the limited claim next to the ordinary one.

The ordinary claims never take a task of a limited processo (flow/limits.py).
``LimitedLiveness`` wraps the worker's liveness: while the ``Limiter`` says a
limited task may be startable (``due``), an executor first tries the limited
claim (db/limits_store.py), then the ordinary one. When the limited claim
finds nothing startable it reports the earliest moment one may start; the
limiter's waker thread sleeps until then and wakes one executor (no polling).
Whatever may let a held-back task start makes the limiter due again: a
notification or the dispatcher's periodic wake-up (a new task, a rescue), and
the end of a limited task in this worker (a slot freed).
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from nsj_queue_lib.db.limits_store import LimitedClaim, LimitsStore
from nsj_queue_lib.flow.limits import ProcessoLimits, disagreements
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import Claim, TaskRecord

logger = get_logger("limits")

NEVER = float("inf")
# With no limits row at all, look again this often (a worker declaring limits may start).
INACTIVE_RECHECK_SECONDS = 30.0
# A wait reported by the claim is rounded up by this much: waking a little after the
# moment, never before it (the claim would then find nothing yet and wait again).
WAKE_MARGIN_SECONDS = 0.001
# How much later than the worker that claimed last the other workers look (a
# whole cluster waking at one moment would queue on the processo's limits row).
FOLLOWER_DELAY_SECONDS = 0.01


class Limiter:
    """When this worker next tries the limited claim; shared by its executor threads."""

    def __init__(
        self,
        queue_name: str,
        limits_store: LimitsStore,
        declared: Mapping[str, ProcessoLimits],
        handled: set[str],
        stop: threading.Event,
    ):
        self.queue_name = queue_name
        self.store = limits_store
        self.declared = dict(declared)
        self.handled = handled
        self.limited: set[str] = set(declared)
        # Processos with max_concurrent: the end of one of their tasks frees a slot.
        self.capped = {p for p, lim in declared.items() if lim.max_concurrent is not None}
        self.wake_executor: Callable[[int], None] = lambda count: None
        self._stop = stop
        self._cond = threading.Condition()
        self._due_at = 0.0  # time.monotonic(); 0: now
        self._generation = 0
        self._active = True
        self._recheck_at = 0.0

    # -- start --

    def register(self, conn: Any) -> None:
        """Write this worker's declarations (autocommit ``conn``), logging any disagreement
        with those of workers that started before it: the latest declaration applies."""
        stored = self.store.declared(conn)
        for line in disagreements(self.declared, stored, self.handled):
            logger.warning(
                "queue=%s: limits disagree between workers of this queue: %s; this worker's "
                "declaration applies from now on (workers of one queue must declare the same)",
                self.queue_name,
                line,
            )
        me = f"{socket.gethostname()}:{os.getpid()}"
        for limits in self.declared.values():
            self.store.declare(conn, limits, me)
        for processo in sorted((set(stored) & self.handled) - set(self.declared)):
            self.store.undeclare(conn, processo)
        self.limited = set(self.declared) | (set(stored) - self.handled)
        self.capped |= {
            p for p, lim in stored.items() if p in self.limited and lim.max_concurrent is not None
        }
        with self._cond:
            self._active = bool(self.limited)

    # -- when --

    def due(self) -> bool:
        now = time.monotonic()
        with self._cond:
            if not self._active:
                return now >= self._recheck_at
            return now >= self._due_at

    def generation(self) -> int:
        with self._cond:
            return self._generation

    def mark_due(self) -> None:
        """Something changed that may let a held-back task start: try at the next claim."""
        with self._cond:
            self._generation += 1
            if self._active:
                self._due_at = 0.0
                self._cond.notify_all()

    def seconds_until_due(self) -> float | None:
        with self._cond:
            if not self._active or self._due_at == NEVER:
                return None
            return max(0.0, self._due_at - time.monotonic())

    def claimed(self, result: LimitedClaim, generation: int) -> None:
        """Record a limited claim's outcome (``generation``: ``generation()`` before it)."""
        now = time.monotonic()
        with self._cond:
            if not result.limits_rows:
                self._active = False
                self._recheck_at = now + INACTIVE_RECHECK_SECONDS
                return
            self._active = True
            if self._generation != generation:
                # Something changed during the claim: the waker wakes an executor to
                # look again (nobody else may be about to).
                self._due_at = now
            elif result.wait is None:
                self._due_at = NEVER
            elif result.task is not None:
                self._due_at = now + result.wait + WAKE_MARGIN_SECONDS
            else:
                # The worker that claimed last looks first when the next start is due;
                # the others a little later, when it has not (it is busy, or gone).
                self._due_at = now + result.wait + FOLLOWER_DELAY_SECONDS
            self._cond.notify_all()

    def ended(self, task: TaskRecord) -> None:
        """A task ended in this worker: one of a processo with max_concurrent frees a slot."""
        if task.row.get("processo") in self.capped:
            self.mark_due()

    # -- the waker thread --

    def run_waker(self) -> None:
        """Sleep until the earliest moment a held-back task may start; then wake one executor.

        Only for a moment a claim reported: after a notification or a task's end,
        whoever made the limiter due claims itself."""
        fired = None
        while not self._stop.is_set():
            with self._cond:
                if self._stop.is_set():  # set before interrupt() notifies, under this lock
                    return
                due_at = self._due_at
                timed = self._active and due_at not in (0.0, NEVER) and due_at != fired
                wait = due_at - time.monotonic() if timed else None
                if wait is None or wait > 0:
                    self._cond.wait(wait)
                    continue
                fired = due_at
            self.wake_executor(1)

    def interrupt(self) -> None:
        with self._cond:
            self._cond.notify_all()


class LimitedLiveness:
    """A liveness that tries the limited claim first while the limiter is due."""

    def __init__(
        self,
        inner: Any,
        limiter: Limiter,
        store: Any,
        lock: Callable[[Any, TaskRecord], bool] | None,
        unlock: Callable[[Any, TaskRecord], None],
    ):
        self.inner = inner
        self.limiter = limiter
        self.store = store
        self._lock = lock  # None: the claim takes the database liveness lock itself
        self._unlock = unlock

    def claim(self, conn: Any, claim_next: bool = True) -> Claim | None:
        if claim_next and self.limiter.due():
            claimed = self._limited(conn)
            if claimed is not None:
                return claimed
        result: Claim | None = self.inner.claim(conn, claim_next)
        return result

    def complete_and_claim(
        self, conn: Any, task: TaskRecord, mensagem: str, claim_next: bool
    ) -> Claim | None:
        self.limiter.ended(task)
        if claim_next and self.limiter.due():
            self.inner.complete_and_claim(conn, task, mensagem, False)
            return self.claim(conn, True)
        result: Claim | None = self.inner.complete_and_claim(conn, task, mensagem, claim_next)
        return result

    # Awaitable forms where the inner liveness has them (the async executor's); the
    # limited claim itself runs in a thread, on the connection the executor gave.

    @property
    def awaitable(self) -> bool:
        return bool(getattr(self.inner, "awaitable", False))

    async def claim_async(self, conn: Any, claim_next: bool = True) -> Claim | None:
        if claim_next and self.limiter.due():
            claimed = await asyncio.to_thread(self._limited, conn)
            if claimed is not None:
                return claimed
        result: Claim | None = await self.inner.claim_async(conn, claim_next)
        return result

    async def complete_and_claim_async(
        self, conn: Any, task: TaskRecord, mensagem: str, claim_next: bool
    ) -> Claim | None:
        self.limiter.ended(task)
        if claim_next and self.limiter.due():
            await self.inner.complete_and_claim_async(conn, task, mensagem, False)
            return await self.claim_async(conn, True)
        result: Claim | None = await self.inner.complete_and_claim_async(
            conn, task, mensagem, claim_next
        )
        return result

    def unlock_in_transaction(self, conn: Any, task: TaskRecord) -> None:
        self.limiter.ended(task)
        self.inner.unlock_in_transaction(conn, task)

    def after_settled(self, task: TaskRecord, conn: Any = None) -> None:
        self.inner.after_settled(task, conn)

    def claim_limited(self, conn: Any) -> Claim | None:
        """The limited claim alone (a commit group claims its batch after it)."""
        return self._limited(conn)

    def _limited(self, conn: Any) -> Claim | None:
        generation = self.limiter.generation()
        try:
            result = self.limiter.store.claim_one(conn, take_lock=self._lock is None)
        except BaseException:
            _rollback_quietly(self.store, conn)
            raise
        task = result.task
        if task is None:
            if result.in_transaction:
                self.store.rollback(conn)
            self.limiter.claimed(result, generation)
            return None
        locked = result.locked
        try:
            if locked is None:
                assert self._lock is not None
                locked = self._lock(conn, task)
            self.store.commit_and_begin(conn)
        except BaseException:
            _rollback_quietly(self.store, conn)
            if locked:
                self._unlock(conn, task)
            raise
        self.limiter.limited.add(str(task.row.get("processo")))
        self.limiter.claimed(result, generation)
        return Claim(task, bool(locked))


def _rollback_quietly(store: Any, conn: Any) -> None:
    try:
        store.rollback(conn)
    except Exception as exc:  # noqa: BLE001 - a broken connection rolled back already
        logger.debug("rollback after a failed limited claim: %s", exc)
