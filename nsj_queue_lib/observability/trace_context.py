"""The W3C trace context a task carries from its enqueue to its worker (``trace_context``).

What is stored: the enqueuing span's ``traceparent`` (version 00, 55 characters),
then ``;`` and its ``tracestate`` when it has one, the whole at most
``model.TRACE_CONTEXT_LIMIT`` characters (list members of the tracestate that do
not fit are left out, from the last one on). Everything stored is checked
against the W3C grammar first, and so is everything read back: a value someone
wrote into the table by hand is ignored, never handed to OpenTelemetry.

``capture`` costs nothing when the application never imported OpenTelemetry: no
span can be active then, so it looks OpenTelemetry up in ``sys.modules`` instead
of importing it. Nothing here imports OpenTelemetry (``tracing.py`` does).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Any

from nsj_queue_lib.model import TRACE_CONTEXT_LIMIT

TRACEPARENT_LENGTH = 55
# version 00: trace id (32 hex, not all zero), parent id (16 hex, not all zero), flags.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# One tracestate list member: key=value (W3C Trace Context, section 3.3.1).
_KEY = r"(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})"
_VALUE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_MEMBER = re.compile(f"{_KEY}={_VALUE}")
_MAX_MEMBERS = 32
SEPARATOR = ";"


@dataclasses.dataclass(frozen=True)
class TraceContext:
    """A stored trace context, checked: ids as integers, and the tracestate members."""

    trace_id: int
    span_id: int
    flags: int
    tracestate: tuple[str, ...] = ()

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 0x01)

    def tracestate_pairs(self) -> list[tuple[str, str]]:
        """The tracestate as (key, value) pairs, in order."""
        return [tuple(member.split("=", 1)) for member in self.tracestate]  # type: ignore[misc]


def encode(trace_id: int, span_id: int, flags: int, tracestate: str = "") -> str | None:
    """The stored form of a span context, or None when it is not a valid W3C context."""
    if not (0 < trace_id < 2**128 and 0 < span_id < 2**64 and 0 <= flags < 256):
        return None
    traceparent = f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
    members = _members(tracestate)
    if not members:
        return traceparent
    room = TRACE_CONTEXT_LIMIT - TRACEPARENT_LENGTH - len(SEPARATOR)
    kept: list[str] = []
    for member in members:
        if len(",".join((*kept, member))) > room:
            break  # W3C: a vendor that must cut the list drops members from its end
        kept.append(member)
    return traceparent + (SEPARATOR + ",".join(kept) if kept else "")


def decode(value: Any) -> TraceContext | None:
    """The trace context of a stored value; None for NULL or anything not well formed."""
    if not isinstance(value, str) or len(value) > TRACE_CONTEXT_LIMIT:
        return None
    match = _TRACEPARENT.fullmatch(value[:TRACEPARENT_LENGTH])
    if match is None:
        return None
    trace_id, span_id = int(match.group(1), 16), int(match.group(2), 16)
    if trace_id == 0 or span_id == 0:
        return None
    rest = value[TRACEPARENT_LENGTH:]
    members: tuple[str, ...] = ()
    if rest:
        if not rest.startswith(SEPARATOR):
            return None
        members = tuple(_members(rest[len(SEPARATOR) :]))
    return TraceContext(trace_id, span_id, int(match.group(3), 16), members)


def _members(tracestate: str) -> list[str]:
    """The well-formed list members of a tracestate header (blank ones skipped); a header with
    a malformed member, a repeated key or too many members is dropped whole (W3C)."""
    members = [m.strip() for m in tracestate.split(",") if m.strip()]
    if len(members) > _MAX_MEMBERS or not all(_MEMBER.fullmatch(m) for m in members):
        return []
    keys = [m.split("=", 1)[0] for m in members]
    return members if len(set(keys)) == len(keys) else []


def capture() -> str | None:
    """The stored form of the span context current in this thread or coroutine, or None: no
    OpenTelemetry imported, no span active, or an invalid context."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None  # never imported: nothing can have started a span
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    state = context.trace_state
    return encode(
        context.trace_id, context.span_id, context.trace_flags, state.to_header() if state else ""
    )
