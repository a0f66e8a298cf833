"""Rows of a psycopg 3 or psycopg2 cursor as dicts (the stores' and the inspection's)."""

from __future__ import annotations

from typing import Any


def rows_as_dicts(cursor) -> list[dict[str, Any]]:
    if cursor.description is None:
        return []
    names = [col[0] for col in cursor.description]
    rows = []
    for row in cursor.fetchall():
        item = dict(zip(names, row, strict=True))
        if isinstance(item.get("payload_hash"), memoryview):  # psycopg2 returns bytea as memoryview
            item["payload_hash"] = bytes(item["payload_hash"])
        rows.append(item)
    return rows
