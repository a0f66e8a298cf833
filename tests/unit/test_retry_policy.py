"""retry_policy: what follows a failed attempt, and the failed row's message (pure).

The random part (full jitter) is driven by seeded or scripted generators, so
the bounds are checked exactly, not by luck.
"""

from __future__ import annotations

import random

import pytest

from nsj_queue_lib import PermanentError
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.retry_policy import (
    DEFAULT_EXPONENTIAL_MAX_S,
    MAX_RETRY_AFTER_S,
    Decision,
    Failure,
    Outcome,
    RetryPolicies,
    RetryPolicy,
    bounded,
    classify,
    failure_message,
)
from nsj_queue_lib.settings import Settings
from nsj_queue_lib.task import EXPONENTIAL, TaskOptions

RNG = random.Random(7)


def linear(max_retry: int, base_minutes: float) -> RetryPolicy:
    return RetryPolicy(max_retry, base_s=base_minutes * 60.0)


def decide(tentativa, dead, max_retry, base_interval_minutes, error="boom"):
    return linear(max_retry, base_interval_minutes).decide(tentativa, dead, error, RNG)


class Scripted(random.Random):
    """``uniform(a, b)`` returns ``a`` or ``b`` (the extremes), and records its bounds."""

    def __init__(self, pick_high: bool) -> None:
        super().__init__(0)
        self.pick_high = pick_high
        self.calls: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.calls.append((a, b))
        return b if self.pick_high else a


# -- the queue's default: 1.2.2's linear policy ---------------------------------------


@pytest.mark.parametrize(
    "tentativa, max_retry, base, delay",
    [
        (1, 3, 5.0, 300.0),  # attempt 1 of 3, 5-minute base: 1 * 5 min
        (2, 3, 5.0, 600.0),  # the back-off grows with the attempt: 2 * 5 min
        (1, 100, 0.001, 0.06),  # fractions of a minute
        (7, 100, 0.5, 210.0),
    ],
)
def test_attempts_before_the_last_are_retried_after_tentativa_times_base(
    tentativa, max_retry, base, delay
):
    decision = decide(tentativa, dead=False, max_retry=max_retry, base_interval_minutes=base)
    assert decision.outcome is Outcome.RETRY
    assert decision.delay_seconds == pytest.approx(delay)


def test_the_linear_delay_is_always_in_the_future():
    for tentativa in range(1, 10):
        assert decide(tentativa, False, 10, 0.001).delay_seconds > 0


@pytest.mark.parametrize("tentativa, max_retry", [(3, 3), (1, 1), (5, 3)])
def test_the_last_attempt_goes_to_the_dead_letter(tentativa, max_retry):
    # max_retry counts attempts (as in 1.2.2): with 3, the failure of attempt 3 is final.
    assert (
        decide(tentativa, dead=False, max_retry=max_retry, base_interval_minutes=5).outcome
        is Outcome.BURY
    )


def test_a_dead_letter_task_is_retried_like_any_other():
    decision = decide(1, dead=True, max_retry=3, base_interval_minutes=2)
    assert decision == Decision(Outcome.RETRY, 120.0)


def test_a_dead_letter_task_that_runs_out_of_attempts_ends_there():
    # No dead letter of a dead letter: nothing follows.
    assert decide(3, dead=True, max_retry=3, base_interval_minutes=2).outcome is Outcome.FINAL


def test_retry_max_s_caps_the_linear_delay():
    policy = RetryPolicy(10, base_s=60.0, max_s=150.0)
    assert [policy.delay(n, RNG) for n in (1, 2, 3, 9)] == [60.0, 120.0, 150.0, 150.0]


# -- exponential back-off with full jitter ------------------------------------------------


@pytest.mark.parametrize("pick_high", [False, True])
def test_exponential_delays_are_drawn_between_zero_and_base_times_two_to_the_retry(pick_high):
    rng = Scripted(pick_high)
    policy = RetryPolicy(20, EXPONENTIAL, base_s=2.0, max_s=50.0)
    delays = [policy.delay(n, rng) for n in range(1, 8)]
    # The n-th failure draws in [0, min(50, 2 * 2 ** (n - 1))]: 2, 4, 8, 16, 32, then capped.
    assert rng.calls == [(0.0, b) for b in (2.0, 4.0, 8.0, 16.0, 32.0, 50.0, 50.0)]
    assert delays == ([2.0, 4.0, 8.0, 16.0, 32.0, 50.0, 50.0] if pick_high else [0.0] * 7)


def test_exponential_delays_of_a_seeded_generator_stay_within_their_bounds_and_vary():
    rng = random.Random(12345)
    policy = RetryPolicy(100, EXPONENTIAL, base_s=0.5, max_s=30.0)
    for n in range(1, 60):
        draws = [policy.delay(n, rng) for _ in range(50)]
        upper = min(30.0, 0.5 * 2 ** (n - 1))
        assert all(0.0 <= d <= upper for d in draws), n
        assert len(set(draws)) > 1  # jitter: not one fixed value
    # Same seed, same delays: a test can pin them.
    assert RetryPolicy(5, EXPONENTIAL, 1.0, 9.0).delay(3, random.Random(1)) == RetryPolicy(
        5, EXPONENTIAL, 1.0, 9.0
    ).delay(3, random.Random(1))


def test_exponential_without_a_cap_stops_growing_at_the_default_cap_and_never_overflows():
    rng = Scripted(pick_high=True)
    policy = RetryPolicy(100_000, EXPONENTIAL, base_s=1.0)
    assert policy.delay(5000, rng) == DEFAULT_EXPONENTIAL_MAX_S


# -- what the error says ------------------------------------------------------------------


def test_a_permanent_error_goes_to_the_dead_letter_on_the_first_attempt():
    decision = decide(1, False, 100, 5, error=PermanentError("no such customer"))
    assert decision == Decision(Outcome.BURY, permanent=True)
    # A dead letter that raises it: nothing follows.
    assert decide(1, True, 100, 5, error=PermanentError("x")).outcome is Outcome.FINAL


def test_a_subclass_of_permanent_error_is_permanent_too():
    class NoSuchCustomer(PermanentError, LookupError):
        pass

    assert classify(NoSuchCustomer()) == Failure(permanent=True)
    assert classify(LookupError()) == Failure()
    assert classify("worker died") == Failure()


class Throttled(Exception):
    def __init__(self, retry_after_s):
        super().__init__("slow down")
        self.retry_after_s = retry_after_s


def test_retry_after_sets_the_earliest_next_attempt_not_the_latest():
    # The policy's own delay (2 * 60 s) is longer: it stays.
    assert decide(2, False, 5, 1, error=Throttled(30)).delay_seconds == 120.0
    # The server asks for longer than the policy would wait: its time wins.
    assert decide(1, False, 5, 1, error=Throttled(600)).delay_seconds == 600.0


@pytest.mark.parametrize(
    "value, expected",
    [(10**9, MAX_RETRY_AFTER_S), (float("inf"), MAX_RETRY_AFTER_S), (0, 0.0)],
)
def test_retry_after_is_bounded(value, expected):
    assert classify(Throttled(value)).retry_after_s == expected


@pytest.mark.parametrize("value", [-1, float("nan"), "60", True, None])
def test_a_retry_after_that_is_not_a_usable_number_is_ignored(value):
    assert classify(Throttled(value)) == Failure()


def test_retry_after_does_not_add_attempts():
    assert decide(3, False, 3, 1, error=Throttled(60)).outcome is Outcome.BURY


# -- per processo -------------------------------------------------------------------------


def settings(**changes) -> Settings:
    values = dict(db_host="h", db_name="d", db_user="u", queue_name="q", queue_table="q")
    values.update(queue_max_retry=4, queue_base_interval_retry=2.0)
    values.update(changes)
    return Settings(**values)


def task(processo: str, tentativa: int = 1) -> TaskRecord:
    return TaskRecord(1, tentativa, False, None, {"processo": processo})


def test_policies_apply_each_processos_options_over_the_queue_default():
    policies = RetryPolicies.build(
        settings(),
        [
            TaskOptions("fast", max_retry=2, retry_base_s=1.5),
            TaskOptions("backoff", retry_backoff="exponential", retry_max_s=500),
        ],
    )
    assert policies.for_processo("other") == RetryPolicy(4, "linear", 120.0, None)
    assert policies.for_processo(None) == policies.default
    assert policies.for_processo("fast") == RetryPolicy(2, "linear", 1.5, None)
    # Unset options fall back to QUEUE_MAX_RETRY and QUEUE_BASE_INTERVAL_RETRY.
    assert policies.for_processo("backoff") == RetryPolicy(4, "exponential", 120.0, 500.0)
    assert policies.decide(task("fast", 1), "x") == Decision(Outcome.RETRY, 1.5)
    assert policies.decide(task("fast", 2), "x").outcome is Outcome.BURY
    assert policies.decide(task("other", 2), "x") == Decision(Outcome.RETRY, 240.0)


def test_a_retry_max_s_below_the_queues_base_interval_is_a_configuration_error():
    with pytest.raises(ConfigError) as info:
        RetryPolicies.build(settings(), [TaskOptions("p", retry_max_s=60)])
    assert list(info.value.problems) == ["@Task('p') retry_max_s"]
    assert "120 s from QUEUE_BASE_INTERVAL_RETRY" in info.value.problems["@Task('p') retry_max_s"]


# -- the failed row's message -------------------------------------------------------------

RETRY = Decision(Outcome.RETRY, 1.0)


def test_failure_message_names_the_exception_type_and_text():
    assert failure_message(ValueError("bad payload"), RETRY, 3, 500) == "ValueError: bad payload"


def test_failure_message_of_an_exception_without_text_is_its_type():
    assert failure_message(SystemExit(), RETRY, 3, 500) == "SystemExit"
    assert failure_message(KeyboardInterrupt(), RETRY, 3, 500) == "KeyboardInterrupt"


def test_failure_message_of_a_string_is_the_string():
    assert failure_message("worker died", RETRY, 3, 500) == "worker died"


@pytest.mark.parametrize("outcome", [Outcome.BURY, Outcome.FINAL])
def test_failure_message_of_the_last_attempt_says_the_maximum_was_reached(outcome):
    text = failure_message(RuntimeError("boom"), Decision(outcome), 4, 500)
    assert text.startswith("RuntimeError: boom")
    assert "maximum of 4 attempts" in text


def test_failure_message_of_a_permanent_error_says_it_was_not_retried():
    text = failure_message(PermanentError("gone"), Decision(Outcome.BURY, permanent=True), 4, 500)
    assert text == "PermanentError: gone (permanent error: not retried)"


def test_failure_message_fits_the_column():
    text = failure_message(RuntimeError("x" * 2000), Decision(Outcome.BURY), 3, 500)
    assert len(text) == 500
    assert text.startswith("RuntimeError: xxx")
    assert text.endswith("...")


@pytest.mark.parametrize(
    "text, limit, expected",
    [
        ("abc", 3, "abc"),
        ("abcd", 3, "..."),
        ("abcdefgh", 6, "abc..."),
        ("", 5, ""),
        ("a\x00b", 3, "a\ufffdb"),
        ("\x00" * 8, 6, "\ufffd" * 3 + "..."),
    ],
)
def test_bounded(text, limit, expected):
    assert bounded(text, limit) == expected
    assert len(bounded(text, limit)) <= limit
