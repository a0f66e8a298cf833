"""How long the recent handlers took: how many tasks a commit group claims, and whether
the next one would keep the finished ones from their commit too long.

A group commits its finished tasks once it has been open QUEUE_BATCH_MAX_MS,
but only between two handlers: a slow handler started just before that
bound holds the tasks finished before it for its whole duration. Handlers of
one ``processo`` tend to take alike, so the group looks at the next task's
processo first: when its recent handlers would take the group past the bound,
the finished tasks commit before it starts.
"""

from __future__ import annotations

from nsj_queue_lib.model import TaskRecord

WEIGHT = 0.2  # of the newest duration in each moving average
PROCESSOS_KEPT = 256  # moving averages kept by processo (past it they start over)


class Pace:
    """Moving averages of handler durations: overall and by processo. Executor threads
    update them without a lock: a lost update only makes an estimate a little older."""

    def __init__(self) -> None:
        self.seconds = 0.0  # every handler's
        self._by_processo: dict[object, float] = {}

    def took(self, task: TaskRecord, seconds: float) -> None:
        self.seconds += (seconds - self.seconds) * WEIGHT
        processo = task.row.get("processo")
        previous = self._by_processo.get(processo)
        if previous is None:
            if len(self._by_processo) >= PROCESSOS_KEPT:
                self._by_processo = {}
            self._by_processo[processo] = seconds
        else:
            self._by_processo[processo] = previous + (seconds - previous) * WEIGHT

    def expected(self, task: TaskRecord) -> float:
        """How long ``task``'s handler will likely take: its processo's recent handlers',
        else every handler's."""
        return self._by_processo.get(task.row.get("processo"), self.seconds)
