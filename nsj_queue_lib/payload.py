"""Payload serialization and hashing (pure functions).

Dict and list payloads are stored as JSON text with sorted keys, so equal
objects always give the same text and the same ``payload_hash``. The hash is
the SHA-256 hex digest stored as its ASCII bytes, which is what nsj-queue-lib
1.2.2 wrote into the ``bytea`` column: hashes of both versions compare equal.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
import uuid
from typing import Any


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"payload value of type {type(value).__name__} is not JSON serializable")


# json.dumps with options builds an encoder per call; one is enough (it keeps no state).
_ENCODER = json.JSONEncoder(
    sort_keys=True,
    ensure_ascii=False,
    separators=(",", ":"),
    allow_nan=False,
    default=_json_default,
)


def serialize_payload(payload: Any) -> str | None:
    """The text stored in the ``payload`` column."""
    if payload is None or isinstance(payload, str):
        return payload
    if isinstance(payload, (dict, list)):
        try:
            return _ENCODER.encode(payload)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"payload cannot be stored as JSON: {exc}") from exc
    raise TypeError(f"payload must be str, dict, list or None, got {type(payload).__name__}")


def payload_hash(text: str | None) -> bytes | None:
    """The value stored in ``payload_hash`` for a serialized payload."""
    if text is None or text == "":
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest().encode("ascii")
