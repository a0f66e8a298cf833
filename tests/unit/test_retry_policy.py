"""retry_policy: what follows a failed attempt, and the failed row's message (pure)."""

from __future__ import annotations

import pytest

from nsj_queue_lib.retry_policy import Decision, Outcome, bounded, decide, failure_message


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


def test_the_delay_is_always_in_the_future():
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


def test_failure_message_names_the_exception_type_and_text():
    assert (
        failure_message(ValueError("bad payload"), Outcome.RETRY, 3, 500)
        == "ValueError: bad payload"
    )


def test_failure_message_of_an_exception_without_text_is_its_type():
    assert failure_message(SystemExit(), Outcome.RETRY, 3, 500) == "SystemExit"
    assert failure_message(KeyboardInterrupt(), Outcome.RETRY, 3, 500) == "KeyboardInterrupt"


def test_failure_message_of_a_string_is_the_string():
    assert failure_message("worker died", Outcome.RETRY, 3, 500) == "worker died"


@pytest.mark.parametrize("outcome", [Outcome.BURY, Outcome.FINAL])
def test_failure_message_of_the_last_attempt_says_the_maximum_was_reached(outcome):
    text = failure_message(RuntimeError("boom"), outcome, 4, 500)
    assert text.startswith("RuntimeError: boom")
    assert "maximum of 4 attempts" in text


def test_failure_message_fits_the_column():
    text = failure_message(RuntimeError("x" * 2000), Outcome.BURY, 3, 500)
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
