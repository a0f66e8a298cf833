"""Rows and SQL text between PyMySQL and the store.

MySQL stores booleans as TINYINT(1) and has no UPDATE ... RETURNING: rows
are given back with Python bools, and an operation PostgreSQL does in one
statement is the ``-- step: <name>`` sections of one named query here.
Times: the columns are TIMESTAMP(6) (UTC inside, the session's time zone
outside); rows come back with naive datetimes in the session's time zone
(UTC on worker connections).
"""

from __future__ import annotations

import datetime
import decimal
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from nsj_queue_lib import model

BOOLEAN_COLUMNS = ("reenfileirado", "estouro_tentativas", "pub_sub", "dead", "ativo")
# The claimed row's timestamp columns, which travel as text in its JSON.
_TIMESTAMP_COLUMNS = ("data_hora_inicial", "data_hora", "proxima_tentativa", "data_hora_anterior")
# One multi-row INSERT stays well below the smallest usual max_allowed_packet
# (16 MiB on MariaDB, 64 MiB on MySQL 8); a larger batch takes a few statements.
INSERT_BATCH_BYTES = 4 * 1024 * 1024

_STEP_LINE = re.compile(r"^-- step: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_TIMESTAMP_MAX_EPOCH = 2**31 - 1  # 2038-01-19 03:14:07 UTC, the end of TIMESTAMP

InsertValues = tuple[str, list[Any]]  # one VALUES row's SQL and its arguments


def split_steps(sql: str) -> dict[str, str]:
    """The ``-- step: <name>`` sections of one named query, in order.

    A query without step lines is a single step called ``sql``.
    """
    parts = _STEP_LINE.split(sql)
    if len(parts) == 1:
        return {"sql": sql.strip().rstrip(";").strip()}
    steps: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in steps:
            raise ValueError(f"step {name!r} appears twice in one query")
        steps[name] = body.strip().rstrip(";").strip()
    return steps


def rows_as_dicts(cursor: Any) -> list[dict[str, Any]]:
    if cursor.description is None:
        return []
    names = [col[0] for col in cursor.description]
    return [normalize(dict(zip(names, row, strict=True))) for row in cursor.fetchall()]


def normalize(item: dict[str, Any]) -> dict[str, Any]:
    for column in BOOLEAN_COLUMNS:
        value = item.get(column)
        if value is not None and not isinstance(value, bool):
            item[column] = bool(value)
    if isinstance(item.get("payload_hash"), (bytearray, memoryview)):
        item["payload_hash"] = bytes(item["payload_hash"])
    return item


def task_from_json(document: str) -> dict[str, Any]:
    """A claimed row sent as the claim procedure's JSON object, with the types a plain SELECT
    gives (``liveness_locked`` stays in it, as GET_LOCK's result)."""
    return task_from_object(json.loads(document))


def task_from_object(task: dict[str, Any]) -> dict[str, Any]:
    """``task_from_json`` of a document already parsed (one item of a batch claim's array)."""
    for column in _TIMESTAMP_COLUMNS:
        value = task[column]
        if value is not None:
            task[column] = datetime.datetime.fromisoformat(value)  # naive, the session's zone (UTC)
    if task["payload_hash"] is not None:
        task["payload_hash"] = bytes.fromhex(task["payload_hash"])
    return normalize(task)


# The set-based batch claim's rows (claim_procedure.sql, dialect.TASK_VALUES): one JSON array
# each, the values of CLAIMED_COLUMNS in that order and then the liveness lock's GET_LOCK
# result (a task claimed alone stays a JSON object: the previous release's workers read it
# too, through previous_claim.sql). The positions of the values converted to what a plain
# SELECT gives:
_ROW_TIMESTAMPS = tuple(model.CLAIMED_COLUMNS.index(c) for c in _TIMESTAMP_COLUMNS)
_ROW_BOOLEANS = tuple(
    model.CLAIMED_COLUMNS.index(c) for c in BOOLEAN_COLUMNS if c in model.CLAIMED_COLUMNS
)
_ROW_PAYLOAD_HASH = model.CLAIMED_COLUMNS.index("payload_hash")
_ROW_ID = model.CLAIMED_COLUMNS.index("id")
_ROW_TENTATIVA = model.CLAIMED_COLUMNS.index("tentativa")
_ROW_DEAD = model.CLAIMED_COLUMNS.index("dead")
_ROW_PAYLOAD = model.CLAIMED_COLUMNS.index("payload")


# json.loads goes through three Python functions and two regular expression matches (for
# whitespace the server never puts around its JSON) before the C scanner; once per claimed
# task that is a fair part of the worker's CPU. The scanner itself, then, with json.loads
# for anything else (whitespace, bytes, a malformed document: its result, or its error).
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _loads(document: Any) -> Any:
    try:
        value, end = _scan_json(document, 0)
    except (StopIteration, TypeError, ValueError):
        return json.loads(document)
    if end != len(document):
        return json.loads(document)
    return value


def claims_from_task_rows(documents: list[str]) -> list[model.Claim]:
    """The claims of a set-based batch sent as one JSON array per task (a row each)."""
    return claims_from_task_values([_loads(document) for document in documents])


def claims_from_batch_document(document: str) -> list[model.Claim]:
    """The claims of a set-based batch sent as one JSON array of the tasks' arrays."""
    return claims_from_task_values(_loads(document))


def claims_from_task_values(tasks: list[list[Any]]) -> list[model.Claim]:
    """The claims of a set-based batch, from its tasks' parsed arrays, with the types a plain
    SELECT gives. Converts by position, before the row becomes a dict: this runs once per
    claimed task, on the worker's critical path (docs/benchmarks.md)."""
    fromisoformat, fromhex = datetime.datetime.fromisoformat, bytes.fromhex
    claims = []
    for values in tasks:
        for position in _ROW_TIMESTAMPS:
            value = values[position]
            if value is not None:
                values[position] = fromisoformat(value)  # naive, the session's zone (UTC)
        for position in _ROW_BOOLEANS:
            value = values[position]
            if value is not None:
                values[position] = value != 0
        value = values[_ROW_PAYLOAD_HASH]
        if value is not None:
            values[_ROW_PAYLOAD_HASH] = fromhex(value)
        # zip stops at the last column: the liveness lock's result, last, stays out of the
        # row. The length is the procedure's, whose version the worker checked at start.
        row = dict(zip(model.CLAIMED_COLUMNS, values, strict=False))
        task = model.TaskRecord(
            values[_ROW_ID],
            values[_ROW_TENTATIVA] or 1,
            bool(values[_ROW_DEAD]),
            values[_ROW_PAYLOAD],
            row,
        )
        claims.append(model.Claim(task, values[-1] == 1))
    return claims


def claimed_row(row: dict[str, Any], first_payloads: dict[int, str | None]) -> dict[str, Any]:
    """A row selected by a claim as the handler sees it: 'processando', payload resolved."""
    row["status"] = model.PROCESSANDO
    if row["payload"] is None and row["id_inicial"] is not None:
        row["payload"] = first_payloads.get(row["id_inicial"])
    return row


def exact_epoch(moment: datetime.datetime) -> decimal.Decimal:
    """Seconds since 1970 of an aware datetime, exact to the microsecond."""
    delta = moment - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return decimal.Decimal(micros).scaleb(-6)


def due_sql(data_hora: datetime.datetime | None) -> tuple[str, list[Any]]:
    """SQL (and its arguments) of a task's data_hora in a VALUES row.

    None is DEFAULT: the column's CURRENT_TIMESTAMP(6), exact whatever the
    session's time zone. A naive datetime is sent as is (read in the session's
    time zone). An aware datetime goes through FROM_UNIXTIME, so the stored
    instant is that exact instant.
    """
    if data_hora is None:
        return "DEFAULT", []
    if data_hora.tzinfo is None or data_hora.utcoffset() is None:
        return "%s", [data_hora]
    epoch = exact_epoch(data_hora)
    if not 0 < epoch <= _TIMESTAMP_MAX_EPOCH:
        raise ValueError(
            f"data_hora {data_hora.isoformat()} is outside what a MySQL TIMESTAMP holds "
            "(1970-01-01 00:00:01 to 2038-01-19 03:14:07 UTC)"
        )
    return "FROM_UNIXTIME(%s)", [epoch]


def insert_batches(values: list[InsertValues]) -> Iterator[list[InsertValues]]:
    """VALUES rows grouped so that one statement stays within INSERT_BATCH_BYTES (roughly)."""
    batch: list[InsertValues] = []
    size = 0
    for value in values:
        row_size = len(value[0]) + sum(_arg_size(a) for a in value[1])
        if batch and size + row_size > INSERT_BATCH_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(value)
        size += row_size
    if batch:
        yield batch


def _arg_size(value: Any) -> int:
    if value is None:
        return 4
    if isinstance(value, str):
        return 2 + 2 * len(value)  # quotes, and room for escaping and multi-byte characters
    if isinstance(value, (bytes, bytearray)):
        return 10 + 2 * len(value)
    return 32
