"""The seam between the runtime and its metrics: an ``Observer`` the runtime reports to.

Every method is a no-op here, which is what a worker without
``QUEUE_METRICS_PORT`` uses (``NULL_OBSERVER``); the Prometheus observer
(``prometheus.py``) records them. The outcome of a finished attempt is a
label value the caller passes: new outcomes need no change here.
"""

from __future__ import annotations

from nsj_queue_lib.model import TaskRecord

# Outcomes of a finished attempt (the ``outcome`` label of nsjq_tasks_finished_total).
SUCESSO = "sucesso"  # the handler returned and its transaction committed
FALHA = "falha"  # the attempt failed; another attempt follows
DEAD = "dead"  # the attempt failed and no attempt is left: the dead letter follows
CANCELADA = "cancelada"  # the handler stopped on a cancel request (TaskCancelled)
RESCUED = "rescued"  # the attempt's worker vanished; the retry service settled it
RELEASED = "released"  # still running when the worker stopped: given back after the grace period


class Observer:
    """What the runtime reports while it works (no-op)."""

    # Whether claims and commits are to be timed for it (claim_round_trip,
    # completion_round_trip): the runtime wraps its claims only then.
    measures_round_trips = False

    def task_claimed(self, task: TaskRecord) -> None:
        """An executor claimed ``task`` (its wait since it became ready ends here)."""

    def claim_round_trip(self, seconds: float, claimed: bool) -> None:
        """One claim's round trip with the database (``claimed``: it returned a task)."""

    def completion_round_trip(self, seconds: float) -> None:
        """One success's round trip: the commit, and the next claim where they travel together."""

    def handler_ran(self, processo: str, seconds: float) -> None:
        """A handler returned or raised after ``seconds``."""

    def task_finished(self, task: TaskRecord, outcome: str) -> None:
        """An attempt ended with ``outcome`` (SUCESSO, FALHA, DEAD, RESCUED, RELEASED or another)."""

    def attempt_failed(self, task: TaskRecord, error: BaseException) -> None:
        """A running attempt failed with ``error`` (its handler's, or its commit's); its
        ``task_finished`` follows."""

    def attempt_abandoned(self, task: TaskRecord, why: str) -> None:
        """This worker ran ``task``'s handler but reports no outcome of it (``why``: another
        worker rescued the attempt, or its timeout gave it up)."""

    def notified(self) -> None:
        """A notification of a new ready task reached the dispatcher."""

    def process_task_ran(
        self, processo: str, kind: str, delay: float | None, seconds: float
    ) -> None:
        """A task of a process (``kind``: 'start', 'call', 'repair', 'timer') started
        ``delay`` seconds after it was due, and its handler, with the process's load and
        save, returned or raised after ``seconds``."""


NULL_OBSERVER = Observer()
