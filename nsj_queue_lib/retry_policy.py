"""What happens after a failed attempt (pure: no database, no clock)."""

from __future__ import annotations

import dataclasses
import enum


class Outcome(enum.Enum):
    RETRY = "retry"  # insert the next attempt, due after ``delay_seconds``
    BURY = "bury"  # attempts exhausted: enqueue the dead-letter task
    FINAL = "final"  # a dead-letter task exhausted its attempts: nothing follows


@dataclasses.dataclass(frozen=True)
class Decision:
    outcome: Outcome
    delay_seconds: float = 0.0


def decide(tentativa: int, dead: bool, max_retry: int, base_interval_minutes: float) -> Decision:
    """Attempt ``tentativa`` failed: retry after ``tentativa * base`` minutes, or give up.

    ``max_retry`` counts attempts, as in nsj-queue-lib 1.2.2: with 3, attempts
    1 and 2 are retried and the failure of attempt 3 goes to the dead letter.
    """
    if tentativa < max_retry:
        return Decision(Outcome.RETRY, tentativa * base_interval_minutes * 60.0)
    return Decision(Outcome.FINAL if dead else Outcome.BURY)


def failure_message(
    error: BaseException | str, outcome: Outcome, max_retry: int, limit: int
) -> str:
    """The ``mensagem`` of a failed attempt, bounded to the column size."""
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}".rstrip(": ")
    else:
        text = error
    if outcome is not Outcome.RETRY:
        text = f"{text} (maximum of {max_retry} attempts reached)"
    return bounded(text, limit)


def bounded(text: str, limit: int) -> str:
    """``text`` as a storable ``mensagem``: at most ``limit`` characters, no NUL.

    PostgreSQL text cannot hold NUL; a handler's message (or an exception's
    text) that has one keeps the rest, with U+FFFD in its place.
    """
    text = text.replace("\x00", "\ufffd")
    if len(text) <= limit:
        return text
    return text[: limit - 3] + "..."
