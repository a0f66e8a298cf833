"""How the command prints: aligned tables for people, ``--json`` for programs.

Tables: a header of upper-case column names, two spaces between columns,
numbers right-aligned, ``-`` for an empty value, times in UTC
(``2024-05-01T12:00:00Z``), no trailing spaces. JSON: one document, times as
ISO 8601 with their offset (``+00:00``), ``null`` for an empty value.
"""

from __future__ import annotations

import datetime
import decimal
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

EMPTY = "-"
GAP = "  "


def cell(value: Any, width: int | None = None) -> str:
    """One value as table text (one line; at most ``width`` characters)."""
    if value is None:
        text = EMPTY
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, datetime.datetime):
        text = value.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    else:
        text = " ".join(str(value).split()) or EMPTY
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def duration(seconds: float | None) -> str | None:
    """``42s``, ``3m05s``, ``2h07m``, ``3d04h`` (None stays None)."""
    if seconds is None:
        return None
    whole = max(0, int(seconds))
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows under their headers, each column as wide as its widest cell."""
    texts = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in texts:
        widths = [max(w, len(t)) for w, t in zip(widths, row, strict=True)]
    # A column of numbers (some may be empty) is right-aligned.
    right = [
        any(_is_number(row[i]) for row in rows)
        and all(_is_number(row[i]) or row[i] is None for row in rows)
        for i in range(len(headers))
    ]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
        ]
        return GAP.join(parts).rstrip()

    return "\n".join([line([h.upper() for h in headers]), *(line(row) for row in texts)])


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def write_json(document: Any, stream: TextIO | None = None) -> None:
    out = sys.stdout if stream is None else stream
    out.write(json.dumps(document, default=_json_default, indent=2, ensure_ascii=False) + "\n")


def write(text: str, stream: TextIO | None = None) -> None:
    out = sys.stdout if stream is None else stream
    out.write(text.rstrip("\n") + "\n")
