"""One commit group's tasks, as its drain goes through them (``drain_group.py``)."""

from __future__ import annotations

import collections
import time
from typing import Any

from nsj_queue_lib.db.task_session import FailureRecord
from nsj_queue_lib.model import Claim, TaskRecord

# Everything a group has not committed: (tasks with their mensagem, None if unstarted;
# failures with their record, to write again if their transaction was lost).
Uncommitted = tuple[list[tuple[TaskRecord, "str | None"]], list[tuple[TaskRecord, FailureRecord]]]


class CommitGroup:
    def __init__(self, claims: list[Claim], asked: int = 0):
        self.started = time.monotonic()
        # Its claim got fewer tasks than it asked for: no more were free (lock keys held by
        # other executors, a short backlog). Such a group's commit may step back.
        self.short = len(claims) < asked
        self.waiting: collections.deque[Claim] = collections.deque(claims)
        # Unstarted tasks given back in the open transaction: claimed again if it fails.
        self.released: list[Claim] = []
        # Successes since the group's last commit, with their mensagem.
        self.written: list[tuple[TaskRecord, str]] = []
        # Failures written there, with how to write them again if the transaction is lost.
        self.failures: list[tuple[TaskRecord, FailureRecord]] = []
        self.savepoint = False  # a savepoint is set for the next handler
        self.abandoned = False  # its running task was given up (timeouts.py)
        self.tx: Any = None  # the dialect's token for the open transaction (TaskSession)
        # What its process tasks share (process/batch.py), where the dialect defers their
        # writes to the group's commit; else None.
        self.processes: Any = None

    def take(self) -> Uncommitted:
        """Everything not committed, the group emptied."""
        tasks: list[tuple[TaskRecord, str | None]] = list(self.written)
        tasks += [(claim.task, None) for claim in self.waiting]
        failures = self.failures
        self.written, self.failures, self.waiting = [], [], collections.deque()
        self.savepoint, self.tx = False, None
        return tasks, failures

    def take_settled(self) -> Uncommitted:
        """``take``, its unstarted tasks kept waiting."""
        waiting, self.waiting = self.waiting, collections.deque()
        taken = self.take()
        self.waiting = waiting
        return taken

    def committed(self) -> list[TaskRecord]:
        """Its finished tasks committed: they leave it, and it opens again from now."""
        done = [task for task, _ in self.written]
        self.written, self.failures, self.released = [], [], []
        self.savepoint, self.tx, self.started = False, None, time.monotonic()
        return done
