"""How a commit group claims: per-processo limits first, then the dialect's batch claim.

The batch claim, like every ordinary claim, never takes a task of a limited
processo (flow/limits.py): those start only through the limited claim, one at
a time, when the worker's limiter says one may be startable
(runtime/limited.py). A group drain therefore tries the limited claim first
while the limiter is due, and runs a task it gets as a group of one (its
commit then frees its max_concurrent slot at once); otherwise it claims a
batch. Every task a group settles tells the limiter it ended.

With the metrics endpoint on, the claims and the commits are reported as the
measured liveness reports a single task's (observability/measured.py).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from nsj_queue_lib.db.task_session import TaskSession
from nsj_queue_lib.model import Claim, TaskRecord
from nsj_queue_lib.observability.observer import Observer
from nsj_queue_lib.runtime.limited import LimitedLiveness


class GroupClaims:
    """``limited``: the worker's limited claim (None without per-processo limits);
    ``observer``: where claims and commits are reported (None without metrics)."""

    def __init__(
        self, session: TaskSession, limited: LimitedLiveness | None, observer: Observer | None
    ):
        self.session = session
        self.limited = limited
        self.observer = observer
        self._last = threading.local()  # per executor thread: what its last claim was

    def limited_due(self) -> bool:
        """Whether the next claim tries the limited claim first (the caller then claims
        with ``claim``, not in its commit's round trip)."""
        return self.limited is not None and self.limited.limiter.due()

    def claim(self, conn: Any, limit: int) -> list[Claim]:
        """Up to ``limit`` tasks, a transaction open on ``conn`` when any was claimed."""
        started = time.perf_counter()
        claims = self._claim(conn, limit)
        if self.observer is not None and limit:
            self.observer.claim_round_trip(time.perf_counter() - started, bool(claims))
            self._claimed(claims)
        return claims

    def last_was_limited(self) -> bool:
        """Whether this thread's last ``claim`` got its task from the limited claim (one
        task, whatever the limit asked for)."""
        return bool(getattr(self._last, "limited", False))

    def _claim(self, conn: Any, limit: int) -> list[Claim]:
        self._last.limited = False
        if limit and self.limited is not None and self.limited.limiter.due():
            claimed = self.limited.claim_limited(conn)
            if claimed is not None:
                self._last.limited = True
                return [claimed]
        return self.session.claim_group(conn, limit)

    def committed(self, started: float, claims: list[Claim]) -> None:
        """A group's commit (since ``perf_counter`` ``started``), with the claims it made."""
        if self.observer is not None:
            self.observer.completion_round_trip(time.perf_counter() - started)
            self._claimed(claims)

    def _claimed(self, claims: list[Claim]) -> None:
        assert self.observer is not None
        for claim in claims:
            self.observer.task_claimed(claim.task)

    def ended(self, task: TaskRecord) -> None:
        """A task of the group was settled: a max_concurrent slot may be free."""
        if self.limited is not None:
            self.limited.limiter.ended(task)

    def ended_all(self, tasks: list[TaskRecord]) -> None:
        """``ended`` for each of a group's tasks."""
        if self.limited is not None:
            self.limited.limiter.ended_all(tasks)
