"""The VALUES rows of MySQL's keyed insert (``insert_task_keyed``): tasks with a dedupe_key,
a lock_key, overrides or a fair key, whose data_hora may be the fair key's turn
(nsj_queue_lib/fleet/fair.py)."""

from __future__ import annotations

import decimal
from typing import Any

from nsj_queue_lib.db.columns import TASK_INSERT_FIELDS
from nsj_queue_lib.db.mysql.rows import InsertValues, due_sql
from nsj_queue_lib.fleet.fair import has_fair_key
from nsj_queue_lib.model import OVERRIDE_COLUMNS

SINGLESTORE_FAIR = (
    "fair_key is not supported on SingleStore (fair shares need the fair key index and "
    "the enqueue's look-ups of it, which its DDL does not have)"
)
MICROSECOND = decimal.Decimal("0.000001")


def prioridade_of(row: dict[str, Any]) -> int:
    prioridade = row.get("prioridade")
    return 50 if prioridade is None else int(prioridade)


def stamped(row: dict[str, Any]) -> bool:
    """Whether the task's data_hora is its fair key's turn (fleet/fair.py): a fair key,
    and no data_hora of its own."""
    return has_fair_key(row) and row.get("data_hora") is None


def keyed_value(row: dict[str, Any], turn: decimal.Decimal | None) -> InsertValues:
    """The insert_task_keyed VALUES row of a task: its data_hora is ``turn`` (seconds since
    1970) when given, and data_hora_inicial its enqueue time."""
    due, due_args = due_sql(row.get("data_hora"))
    stamp, stamp_args = (due, due_args) if turn is None else ("FROM_UNIXTIME(%s)", [turn])
    args = [row[name] for name in TASK_INSERT_FIELDS]
    args += [row.get("prioridade"), *stamp_args, *due_args, row["dedupe_key"], row["lock_key"]]
    args.append(row.get("trace_context"))
    args += [row.get(name) for name in OVERRIDE_COLUMNS]
    args.append(row.get("fair_key"))
    return (
        f"(%s, %s, %s, %s, %s, %s, %s, %s, %s, COALESCE(%s, 50), {stamp}, {due}, %s, %s, %s"
        ", %s, %s, %s, %s)",
        args,
    )
