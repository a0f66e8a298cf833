"""After a commit group's COMMIT failed: its tasks run alone until they have been seen.

A COMMIT that fails (a deferred constraint, a serialization failure, the
connection lost at that moment) takes the whole group with it, and nothing
tells which task's work made it fail. Counting a failed attempt against each
would punish the innocent ones, and grouping them again would fail them all
again. So the group's finished tasks go back to 'pendente' as if they never
ran (runtime/group_commit.py), and this worker claims one task at a time,
each committed alone (the one-commit path: a task whose commit fails alone
records its failure, as without groups), until it has claimed each of those
tasks again, or claimed twice as many tasks as there were without meeting
them (another worker took them: its own commit, alone or in a group, will
tell).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from nsj_queue_lib.model import Claim

# Claims made alone while isolating, per suspect, before giving up on meeting them.
CLAIMS_PER_SUSPECT = 2


class Isolation:
    """The suspects of failed group commits, shared by an executor's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._suspects: set[int] = set()
        self._claims_left = 0

    def suspect(self, task_ids: Iterable[int]) -> None:
        """These tasks were in a group whose commit failed: each runs alone next time."""
        with self._lock:
            self._suspects.update(task_ids)
            self._claims_left = max(self._claims_left, CLAIMS_PER_SUSPECT * len(self._suspects))

    def active(self) -> bool:
        """Whether claims must take one task at a time."""
        with self._lock:
            return bool(self._suspects)

    def claimed(self, claims: list[Claim]) -> None:
        """A claim of one while isolating: a suspect met is cleared; the budget shrinks. (A
        larger claim was made before the isolation began: it runs as claimed.)"""
        with self._lock:
            if not self._suspects or len(claims) != 1:
                return
            self._suspects.discard(claims[0].task.id)
            self._claims_left -= 1
            if self._claims_left <= 0:
                self._suspects.clear()

    def suspects(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._suspects)
