"""Per-processo limits in a worker: the limited claim next to the ordinary one.

The ordinary claims never take a task of a limited processo (flow/limits.py).
``LimitedLiveness`` wraps the worker's liveness: while the ``Limiter`` says a
limited task may be startable (``due``), an executor first tries the limited
claim (db/limits_store.py), then the ordinary one. The limited claim reports
the seconds until the next start is due; the limiter's waker thread sleeps
until ``EARLY_SECONDS`` before that moment and wakes one executor, whose claim
waits in the database, holding the processo's limits row, until the moment
itself (no polling, and the start lands on its due time). Whatever may let a
held-back task start makes the limiter due again: a notification or the
dispatcher's periodic wake-up (a new task, a rescue), and the end of a limited
task in this worker (a slot freed). Time windows are judged here (zoneinfo)
and passed to the claim as the list of the open ones.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from nsj_queue_lib.db.limits_store import LimitedClaim, LimitsStore
from nsj_queue_lib.db.task_session import ClaimPhases
from nsj_queue_lib.flow.limits import (
    EARLY_SECONDS,
    ProcessoLimits,
    disagreements,
    window_states,
)
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import Claim, TaskRecord

logger = get_logger("limits")

NEVER = float("inf")
# With no limits row at all, look again this often (a worker declaring limits may start).
INACTIVE_RECHECK_SECONDS = 30.0
# How much later than the worker that claimed last the other workers look: after
# its claim, which waits for the due moment holding the processo's limits row
# (a whole cluster calling at one moment would queue on that row). They take
# over when it does not claim (its executors are busy, or it is gone).
FOLLOWER_DELAY_SECONDS = EARLY_SECONDS + 0.015


class Limiter:
    """When this worker next tries the limited claim; shared by its executor threads."""

    def __init__(
        self,
        queue_name: str,
        limits_store: LimitsStore,
        declared: Mapping[str, ProcessoLimits],
        handled: set[str],
        stop: threading.Event,
        claims_every_processo: bool = True,
        wake_executor: Callable[[int], None] = lambda count: None,
    ):
        self.queue_name = queue_name
        self.store = limits_store
        self.declared = dict(declared)
        self.handled = handled
        # False for a worker routing by @Task: it never claims other workers' processos.
        self.claims_every_processo = claims_every_processo
        self.limited: set[str] = set(declared)
        # Processos with a circuit breaker (fleet/breakers.py): the limited claim takes
        # their trial, so this worker looks at the limited claim for them too.
        self.breakers: set[str] = set()
        # Every limits row known (this worker's and the others'), for their time windows.
        self.known: dict[str, ProcessoLimits] = dict(declared)
        # Processos with max_concurrent or max_concurrent_per_key: the end of one of their
        # tasks frees a slot.
        self.capped = {p for p, lim in declared.items() if _capped(lim)}
        self.wake_executor = wake_executor
        self._stop = stop
        self._cond = threading.Condition()
        self._due_at = 0.0  # time.monotonic(); 0: now
        self._generation = 0
        self._active = True
        self._recheck_at = 0.0
        # This worker claimed the last start it knows of: when its call for the next one
        # goes out (time.monotonic()), or None (a follower).
        self._lead_at: float | None = None

    # -- start --

    def register(self, conn: Any) -> None:
        """Write this worker's declarations (autocommit ``conn``), logging any disagreement
        with those of workers that started before it: the latest declaration applies."""
        self.store.check(conn)  # ClaimRoutineError: the queue needs db_gen --upgrade
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
        # Other workers' limited processos matter only to a worker that claims them.
        foreign = set(stored) - self.handled if self.claims_every_processo else set()
        self.limited = set(self.declared) | foreign | self.breakers
        self.known = {**stored, **self.declared}
        self.capped |= {p for p, lim in stored.items() if p in self.limited and _capped(lim)}
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

    def activate(self) -> None:
        """A limits row was just written (a circuit breaker opened): try the limited claim at
        the next claim, even when the last one found the limits table empty."""
        with self._cond:
            self._active = True
            self._generation += 1
            self._due_at = 0.0
            self._cond.notify_all()

    def seconds_until_due(self) -> float | None:
        with self._cond:
            if not self._active or self._due_at == NEVER:
                return None
            return max(0.0, self._due_at - time.monotonic())

    def windows(self) -> tuple[list[str], list[str], float | None]:
        """The time windows as the limited claim takes them (flow.limits.window_states)."""
        now = datetime.datetime.now(datetime.timezone.utc)
        return window_states(list(self.known.values()), now)

    def reload(self, conn: Any) -> None:
        """Read every processo's declaration again (another worker declared time windows
        this one does not know: until then the claim holds that processo back)."""
        self.known = {**self.store.declared(conn), **self.declared}

    def claimed(
        self,
        result: LimitedClaim,
        generation: int,
        opens_in: float | None = None,
        started: float | None = None,
    ) -> None:
        """Record a limited claim's outcome (``generation``: ``generation()`` before it;
        ``opens_in``: seconds until a closed time window opens; ``started``: the
        ``time.monotonic()`` the call went out at)."""
        now = time.monotonic()
        with self._cond:
            if not result.limits_rows:
                self._active = False
                self._recheck_at = now + INACTIVE_RECHECK_SECONDS
                self._lead_at = None
                return
            self._active = True
            waits = [w for w in (result.wait, opens_in) if w is not None]
            if not waits:
                self._lead_at = None
            elif result.task is not None:
                # The claim returns when its task starts: the next call goes out
                # EARLY_SECONDS ahead of the next start and waits for it in the database.
                self._lead_at = now + min(waits) - EARLY_SECONDS
            elif self._lead_at is not None and started is not None and started < self._lead_at:
                # Nothing yet from a call that went before this worker's lead moment (a
                # wake-up's look, or a look again): it leads still. Made a follower, it
                # would leave the start to the others' later look (FOLLOWER_DELAY_SECONDS
                # late; MariaDB's polling wake-ups made that 3 in 100 gaps of bench_limits).
                pass
            else:
                self._lead_at = None
            if self._generation != generation or result.stale_windows:
                # Something changed during the claim: the waker wakes an executor to
                # look again (nobody else may be about to).
                self._due_at = now
            elif not waits:
                self._due_at = NEVER
            else:
                # The worker that claimed last looks first when the next start is due;
                # the others a little later, when it has not (it is busy, or gone).
                follower = now + min(waits) - EARLY_SECONDS + FOLLOWER_DELAY_SECONDS
                self._due_at = min(follower, NEVER if self._lead_at is None else self._lead_at)
            self._due_at = max(self._due_at, 1e-9)  # 0.0 means "now, without the waker"
            self._cond.notify_all()

    def ended(self, task: TaskRecord) -> None:
        """A task ended in this worker: one of a processo with max_concurrent (or
        max_concurrent_per_key) frees a slot."""
        if task.row.get("processo") in self.capped:
            self.mark_due()

    def ended_all(self, tasks: list[TaskRecord]) -> None:
        """``ended`` for each of a commit group's tasks (nothing to look at per task when no
        processo has max_concurrent, the usual case)."""
        capped = self.capped
        if capped:
            for task in tasks:
                if task.row.get("processo") in capped:
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


def _capped(limits: ProcessoLimits) -> bool:
    return limits.max_concurrent is not None or limits.max_concurrent_per_key is not None


class LimitedLiveness:
    """A liveness that tries the limited claim first while the limiter is due.

    ``take_lock``: the claim takes the task's database liveness lock. ``after_claim``
    (None: the claim commits itself) runs on the claim's open transaction before it
    commits: the socket server's lock (True, or it raises), or nsj-queue-lib 1.2.2's key
    under QUEUE_COMPAT_1_2_2 (False: a 1.2.2 worker holds it; the claim is undone and
    the task left to that worker). ``unlock`` releases what a failed claim took.
    """

    def __init__(
        self,
        inner: Any,
        limiter: Limiter,
        phases: ClaimPhases,
        after_claim: Callable[[Any, TaskRecord], bool] | None,
        unlock: Callable[[Any, TaskRecord], None],
        take_lock: bool = True,
    ):
        self.inner = inner
        self.limiter = limiter
        self.phases = phases
        self._after_claim = after_claim
        self._unlock = unlock
        self._take_lock = take_lock

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
        limiter = self.limiter
        generation = limiter.generation()
        started = time.monotonic()
        open_windows, known_windows, opens_in = limiter.windows()
        try:
            result = limiter.store.claim(
                conn,
                self._take_lock,
                open_windows,
                known_windows,
                commit=self._after_claim is None,
            )
        except BaseException:
            self.phases.drop(conn)
            raise
        task = result.task
        if task is None:
            if result.stale_windows:
                limiter.reload(conn)
            limiter.claimed(result, generation, opens_in, started)
            return None
        locked = bool(result.locked) if self._take_lock else True
        if self._after_claim is not None:
            try:
                go_on = self._after_claim(conn, task)
                if go_on:
                    self.phases.keep(conn)
            except BaseException:
                self.phases.drop(conn)
                if locked:
                    self._unlock(conn, task)
                raise
            if not go_on:
                self.phases.drop(conn)
                if self._take_lock and locked:
                    self._unlock(conn, task)
                limiter.claimed(
                    dataclasses.replace(result, task=None), generation, opens_in, started
                )
                return None
        limiter.limited.add(str(task.row.get("processo")))
        limiter.claimed(result, generation, opens_in, started)
        return Claim(task, locked)
