"""What happens after a failed attempt (pure: no database, no clock).

A ``RetryPolicy`` says how many attempts a task gets and how long to wait
before each retry. The queue's default keeps nsj-queue-lib 1.2.2's meaning
(``QUEUE_MAX_RETRY`` attempts, the n-th retry ``n * QUEUE_BASE_INTERVAL_RETRY``
minutes after the failure); ``@Task`` options override it per ``processo``
(``RetryPolicies``). The error itself can change the outcome (``classify``):
a ``PermanentError`` is never retried, and an error that carries
``retry_after_s`` (a webhook's ``Retry-After``) sets the earliest next attempt.
"""

from __future__ import annotations

import dataclasses
import enum
import random
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from nsj_queue_lib.exceptions import ConfigError, PermanentError
from nsj_queue_lib.task import LINEAR, TaskOptions

if TYPE_CHECKING:
    from nsj_queue_lib.model import TaskRecord
    from nsj_queue_lib.settings import Settings

# Exponential back-off without retry_max_s: the retries keep coming at least hourly.
DEFAULT_EXPONENTIAL_MAX_S = 3600.0
# A Retry-After beyond a day is taken as a day: a broken or hostile server must not
# park a delivery for months.
MAX_RETRY_AFTER_S = 86400.0
_MAX_EXPONENT = 1000  # 2.0 ** 1024 overflows; any cap is reached long before


class Outcome(enum.Enum):
    RETRY = "retry"  # insert the next attempt, due after ``delay_seconds``
    BURY = "bury"  # no retry: enqueue the dead-letter task
    FINAL = "final"  # a dead-letter task that will not be retried: nothing follows


@dataclasses.dataclass(frozen=True)
class Decision:
    outcome: Outcome
    delay_seconds: float = 0.0
    permanent: bool = False  # no retry because of the error, not the attempt count


@dataclasses.dataclass(frozen=True)
class Failure:
    """What an error says about retrying: never, or not before ``retry_after_s``."""

    permanent: bool = False
    retry_after_s: float | None = None


def classify(error: BaseException | str) -> Failure:
    if isinstance(error, PermanentError):
        return Failure(permanent=True)
    after = getattr(error, "retry_after_s", None)
    if isinstance(after, (int, float)) and not isinstance(after, bool) and after >= 0:
        return Failure(retry_after_s=min(float(after), MAX_RETRY_AFTER_S))
    return Failure()


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    max_retry: int  # attempts, the first included (as QUEUE_MAX_RETRY)
    backoff: str = LINEAR
    base_s: float = 300.0
    max_s: float | None = None

    def delay(self, tentativa: int, rng: random.Random) -> float:
        """Seconds from the failure of attempt ``tentativa`` to the next attempt.

        Linear: ``tentativa * base_s``. Exponential with full jitter: uniform in
        ``[0, min(max_s, base_s * 2 ** (tentativa - 1))]``, so the first retry
        waits up to ``base_s``, the second up to twice that, and so on.
        """
        if self.backoff == LINEAR:
            delay = tentativa * self.base_s
            return delay if self.max_s is None else min(delay, self.max_s)
        cap = self.max_s if self.max_s is not None else DEFAULT_EXPONENTIAL_MAX_S
        exponent = min(max(tentativa - 1, 0), _MAX_EXPONENT)
        return rng.uniform(0.0, min(cap, self.base_s * 2.0**exponent))

    def decide(
        self, tentativa: int, dead: bool, error: BaseException | str, rng: random.Random
    ) -> Decision:
        """Attempt ``tentativa`` failed with ``error``: retry after a delay, or give up.

        ``max_retry`` counts attempts, as in nsj-queue-lib 1.2.2: with 3,
        attempts 1 and 2 are retried and the failure of attempt 3 goes to the
        dead letter.
        """
        failure = classify(error)
        give_up = Outcome.FINAL if dead else Outcome.BURY
        if failure.permanent:
            return Decision(give_up, permanent=True)
        if tentativa >= self.max_retry:
            return Decision(give_up)
        delay = self.delay(tentativa, rng)
        if failure.retry_after_s is not None:
            delay = max(delay, failure.retry_after_s)
        return Decision(Outcome.RETRY, delay)


def default_policy(settings: Settings) -> RetryPolicy:
    """The queue's policy: QUEUE_MAX_RETRY attempts, linear QUEUE_BASE_INTERVAL_RETRY minutes."""
    return RetryPolicy(settings.queue_max_retry, LINEAR, settings.queue_base_interval_retry * 60.0)


class RetryPolicies:
    """The policy of each processo of a worker, the queue's default for the rest."""

    def __init__(
        self,
        default: RetryPolicy,
        per_processo: Mapping[str, RetryPolicy] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.default = default
        self.per_processo = dict(per_processo or {})
        self.rng = rng if rng is not None else random.Random()

    @classmethod
    def build(
        cls,
        settings: Settings,
        options: Iterable[TaskOptions] = (),
        rng: random.Random | None = None,
    ) -> RetryPolicies:
        """The policies of ``@Task`` options over the settings' default.

        Raises ``ConfigError`` when an option only turns out wrong against the
        settings (a retry_max_s below the default base interval).
        """
        default = default_policy(settings)
        policies: dict[str, RetryPolicy] = {}
        problems: dict[str, str] = {}
        for option in options:
            policy = RetryPolicy(
                option.max_retry if option.max_retry is not None else default.max_retry,
                option.retry_backoff or LINEAR,
                option.retry_base_s if option.retry_base_s is not None else default.base_s,
                option.retry_max_s,
            )
            if policy.max_s is not None and policy.max_s < policy.base_s:
                problems[f"@Task({option.processo!r}) retry_max_s"] = (
                    f"must be >= the retry base ({policy.base_s:g} s from "
                    f"QUEUE_BASE_INTERVAL_RETRY), got {policy.max_s:g}"
                )
            policies[option.processo] = policy
        if problems:
            raise ConfigError(problems)
        return cls(default, policies, rng)

    def for_processo(self, processo: str | None) -> RetryPolicy:
        if processo is None:
            return self.default
        return self.per_processo.get(processo, self.default)

    def for_task(self, task: TaskRecord) -> RetryPolicy:
        """The task's policy: its processo's, with the ``max_retry`` it was enqueued with
        (docs/fleet-control.md) over the processo's and the queue's."""
        policy = self.for_processo(task.row.get("processo"))
        override = task.row.get("max_retry")
        if override is None or override == policy.max_retry:
            return policy
        return dataclasses.replace(policy, max_retry=int(override))

    def decide(self, task: TaskRecord, error: BaseException | str) -> Decision:
        policy = self.for_task(task)
        return policy.decide(task.tentativa, task.dead, error, self.rng)


def failure_message(
    error: BaseException | str, decision: Decision, max_retry: int, limit: int
) -> str:
    """The ``mensagem`` of a failed attempt, bounded to the column size."""
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}".rstrip(": ")
    else:
        text = error
    if decision.permanent:
        text = f"{text} (permanent error: not retried)"
    elif decision.outcome is not Outcome.RETRY:
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
