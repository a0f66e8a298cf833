"""A task's state in the words operators expect, read from one attempt's row.

``status`` is an attempt's, and alone it misleads: a task that ran out of attempts
is a ``falha`` row with ``estouro_tentativas`` whose dead letter is a new task
(``dead``, ``live_id``) that ``execute_dead`` usually ends ``sucesso`` -- shown
raw, every dead letter looked like a success. The state names what happened to
the task, as River UI and Oban Web do (completed, retryable, discarded,
cancelled); the console shows it next to the raw status, the API as ``state``.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.web.humane import instant


@dataclasses.dataclass(frozen=True)
class State:
    name: str  # the API's ``state`` and the console's CSS class
    tone: str  # the colour: ok, bad, retry, wait, run, off
    meaning: str  # the console's hover text

    @property
    def words(self) -> str:
        return self.name.replace("_", " ")


WAITING = State("waiting", "wait", "due: waits for a worker")
SCHEDULED = State("scheduled", "wait", "waits until it is due")
RUNNING = State("running", "run", "a worker runs it")
CANCELLING = State("cancelling", "run", "running; a cancel was requested")
RETRYING = State("retrying", "retry", "an attempt failed; the next one waits or runs")
COMPLETED = State("completed", "ok", "done")
RETRIED = State("retried", "retry", "this attempt failed and a next attempt followed")
FAILED = State("failed", "bad", "failed; no attempt follows")
EXHAUSTED = State(
    "exhausted", "bad", "ran out of attempts or failed permanently: its dead letter follows"
)
DEAD_LETTER = State("dead_letter", "bad", "what is left of a task that ran out of attempts")
CANCELLED = State("cancelled", "off", "cancelled before it ran, or stopped on a cancel request")
STATES = (
    WAITING,
    SCHEDULED,
    RUNNING,
    CANCELLING,
    RETRYING,
    COMPLETED,
    RETRIED,
    FAILED,
    EXHAUSTED,
    DEAD_LETTER,
    CANCELLED,
)
BY_NAME = {state.name: state for state in STATES}
_FAILED = (model.FALHA, model.FALHA_PROCESSANDO)


def state_of(attempt: Mapping[str, Any], now: datetime.datetime) -> State:
    """The state of the task whose attempt ``attempt`` is (its latest one, for the task's
    own state); ``now`` tells a waiting task from a scheduled one."""
    status = attempt.get("status")
    if attempt.get("dead"):
        return DEAD_LETTER  # whatever its own status: its task is the one that died
    if status in _FAILED:
        if attempt.get("reenfileirado"):  # a next attempt followed (a manual retry too)
            return RETRIED
        return EXHAUSTED if attempt.get("estouro_tentativas") else FAILED
    if status == model.SUCESSO:
        return COMPLETED
    if status == model.CANCELADA:
        return CANCELLED
    if status == model.PROCESSANDO:
        return CANCELLING if attempt.get("cancel_requested") else RUNNING
    if int(attempt.get("tentativa") or 1) > 1:
        return RETRYING
    due = instant(attempt.get("data_hora"))
    return SCHEDULED if due is not None and due > now else WAITING
