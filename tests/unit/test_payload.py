"""Payload text and hash: deterministic, and equal to what nsj-queue-lib 1.2.2 stored."""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
import string
import uuid

import pytest

from nsj_queue_lib.payload import payload_hash, serialize_payload


def test_strings_and_none_are_stored_as_given():
    assert serialize_payload("conteúdo da mensagem") == "conteúdo da mensagem"
    assert serialize_payload("") == ""
    assert serialize_payload(None) is None
    assert (
        serialize_payload('{"b": 1, "a": 2}') == '{"b": 1, "a": 2}'
    )  # text is never re-serialized


def test_dict_keys_are_sorted_at_every_level():
    text = serialize_payload({"b": 1, "a": {"z": [3, {"y": 1, "x": 2}], "c": None}})
    pairs = json.loads(text, object_pairs_hook=lambda items: [k for k, _ in items])
    assert pairs == ["a", "b"]
    assert text.index('"c"') < text.index('"z"')
    assert text.index('"x"') < text.index('"y"')
    assert json.loads(text) == {"b": 1, "a": {"z": [3, {"y": 1, "x": 2}], "c": None}}


def test_equal_objects_give_the_same_text_and_hash():
    first = {"pedido": 10, "itens": [{"sku": "A", "qtd": 1}], "cliente": "José"}
    second = {"cliente": "José", "itens": [{"qtd": 1, "sku": "A"}], "pedido": 10}
    assert serialize_payload(first) == serialize_payload(second)
    assert payload_hash(serialize_payload(first)) == payload_hash(serialize_payload(second))
    different = dict(first, pedido=11)
    assert payload_hash(serialize_payload(first)) != payload_hash(serialize_payload(different))


def test_lists_keep_their_order():
    assert json.loads(serialize_payload([3, 1, 2])) == [3, 1, 2]
    assert serialize_payload([1, 2]) != serialize_payload([2, 1])


def test_unicode_is_stored_as_text():
    text = serialize_payload({"nome": "ação ✓"})
    assert "ação ✓" in text
    assert json.loads(text) == {"nome": "ação ✓"}


def test_common_python_values_become_json():
    moment = datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.timezone.utc)
    key = uuid.UUID("12345678-1234-5678-1234-567812345678")
    text = serialize_payload(
        {
            "when": moment,
            "day": datetime.date(2024, 5, 1),
            "id": key,
            "amount": decimal.Decimal("10.50"),
        }
    )
    assert json.loads(text) == {
        "when": moment.isoformat(),
        "day": "2024-05-01",
        "id": str(key),
        "amount": "10.50",
    }


@pytest.mark.parametrize("payload", [42, 1.5, b"bytes", {1, 2}, (1, 2), object(), True])
def test_unsupported_payload_types_are_refused(payload):
    with pytest.raises((TypeError, ValueError)):
        serialize_payload(payload)


@pytest.mark.parametrize("payload", [{"x": object()}, {"x": {1, 2}}, [b"raw"]])
def test_unserializable_content_is_a_value_error(payload):
    with pytest.raises(ValueError, match="JSON"):
        serialize_payload(payload)


@pytest.mark.parametrize("number", [float("nan"), float("inf")])
def test_non_finite_numbers_are_refused(number):
    with pytest.raises(ValueError):
        serialize_payload({"x": number})


def test_hash_is_the_ascii_hex_sha256_digest():
    text = "conteúdo da mensagem"
    digest = payload_hash(text)
    assert isinstance(digest, bytes)
    assert len(digest) == 64
    assert set(digest.decode("ascii")) <= set(string.hexdigits.lower())
    # exactly what nsj-queue-lib 1.2.2 computed: hashlib.sha256(payload.encode()).hexdigest()
    assert digest == hashlib.sha256(text.encode()).hexdigest().encode("ascii")


def test_hash_of_serialized_dict_is_the_hash_of_its_text():
    text = serialize_payload({"a": 1})
    assert payload_hash(text) == hashlib.sha256(text.encode("utf-8")).hexdigest().encode()


def test_no_payload_no_hash():
    assert payload_hash(None) is None
    assert payload_hash("") is None
    assert payload_hash(" ") is not None
