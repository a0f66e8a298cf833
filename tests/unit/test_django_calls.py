"""nsj_queue_lib.contrib.django's mappings, without a database: priorities, result ids,
payloads, return values in mensagem and errors' exception classes."""

from __future__ import annotations

import pytest

from tests.helpers.django_support import require_django

require_django()

from nsj_queue_lib.contrib.django import calls, results  # noqa: E402 - needs Django


def test_priorities_keep_their_order_within_the_queues_range():
    mapped = [calls.queue_priority(p) for p in range(-100, 101)]
    assert mapped[0] == 0 and mapped[-1] == 200 and calls.queue_priority(0) == 100
    assert mapped == sorted(set(mapped))  # strictly increasing: no two priorities merge


def test_result_ids_round_trip_and_reject_other_text():
    assert calls.parse_result_id(calls.result_id("emails", 42)) == ("emails", 42)
    assert calls.parse_result_id("a:b:7") == ("a:b", 7)
    for bad in ("42", ":42", "emails:", "emails:-1", "emails:4x"):
        assert calls.parse_result_id(bad) is None


def test_a_payload_not_written_by_the_backend_is_not_a_call():
    for text in (None, "", "plain", "[]", '{"task": 1}', '{"task": "m.f", "args": {}}'):
        assert calls.read_payload(text) is None
    call = calls.read_payload('{"task": "m.f", "args": [1], "kwargs": {}}')
    assert call is not None and call["args"] == [1]


def test_return_values_are_json_in_mensagem_when_they_fit():
    text = results.encode_return_value({"ok": [1, "é"]})
    assert text == '{"ok":[1,"é"]}' and results.decode_return_value(text) == {"ok": [1, "é"]}
    assert results.decode_return_value(results.encode_return_value(None)) is None
    long = results.encode_return_value("x" * 600)
    assert long.startswith("return value not stored: its JSON has 602 characters")
    assert len(long) <= 500 and results.decode_return_value(long) is None
    with pytest.raises(TypeError):
        results.encode_return_value(object())


@pytest.mark.parametrize(
    "mensagem, path",
    [
        ("myapp.errors.Unpaid: no money (maximum of 1 attempts reached)", "myapp.errors.Unpaid"),
        ("ValueError: bad", "builtins.ValueError"),
        (
            "PermanentError: gone (permanent error: not retried)",
            "nsj_queue_lib.exceptions.PermanentError",
        ),
        (
            "cancelled before it ran (QueueClient.cancel_task)",
            "nsj_queue_lib.exceptions.TaskCancelled",
        ),
        ("timeout: the attempt ran longer than 5 s", "builtins.Exception"),
        (None, "builtins.Exception"),
    ],
)
def test_a_failed_attempts_mensagem_names_its_exception_class(mensagem, path):
    assert results._class_path(mensagem or "") == path
