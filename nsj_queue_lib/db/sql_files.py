"""Loading the SQL files that live next to each dialect.

Two kinds of files:
- templates (``ddl.sql``...), filled by ``render`` with already-validated
  identifiers; only ``{name}`` placeholders known to the caller are replaced,
  so braces elsewhere in SQL are left alone;
- ``queries.sql``: named queries, each introduced by a ``-- name: <name>``
  line. Every dialect's file carries the same names. ``inspection.sql``
  holds the read-mostly queries of the ``nsjq`` command in the same form.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

_NAME_LINE = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
# A dialect whose queries mostly equal another's names it once and keeps only
# the queries that differ: "-- base: <dialect>" in the file's preamble.
_BASE_LINE = re.compile(r"^-- base: ([a-z_]+)\s*$", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


@functools.cache
def read_sql(dialect: str, filename: str) -> str:
    return resources.files(f"nsj_queue_lib.db.{dialect}").joinpath(filename).read_text("utf-8")


def sql_code(text: str) -> str:
    """``text`` without its comment lines: what a routine's version is computed from, so that
    rewording a comment never asks for an upgrade."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))


def render(template: str, values: dict[str, str]) -> str:
    """Replace ``{key}`` placeholders; a placeholder without a value is an error."""

    def substitute(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"SQL template placeholder {{{key}}} has no value")
        return values[key]

    return _PLACEHOLDER.sub(substitute, template)


@functools.cache
def load_queries(dialect: str, filename: str = "queries.sql") -> dict[str, str]:
    """Named queries of a dialect: {name: sql text with placeholders}.

    With ``-- base: <other>`` in the preamble, the other dialect's queries are
    the starting point and this file's queries replace them by name.
    """
    text = read_sql(dialect, filename)
    parts = _NAME_LINE.split(text)
    base = _BASE_LINE.search(parts[0])
    inherited = dict(load_queries(base.group(1), filename)) if base else {}
    own: dict[str, str] = {}
    # parts = [preamble, name1, body1, name2, body2, ...]
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in own:
            raise ValueError(f"query {name!r} defined twice in {dialect}/{filename}")
        own[name] = body.strip().rstrip(";")
    return {**inherited, **own}


def render_queries(
    dialect: str, values: dict[str, str], filename: str = "queries.sql"
) -> dict[str, str]:
    return {name: render(sql, values) for name, sql in load_queries(dialect, filename).items()}


# One index probe per status (both are partial indexes of the queue table).
_READY_TASKS = (
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM {table} WHERE status = 'pendente' AND data_hora <= {now}) "
    "OR EXISTS (SELECT 1 FROM {table} WHERE status = 'agendada' AND data_hora <= {now}) "
    "THEN 1 ELSE 0 END"
)


# Running attempts with a cancel request (the socket server's check where there is no
# NOTIFY); bounded, as the server reads it every second.
_CANCEL_REQUESTS = "SELECT id FROM {table} WHERE status = 'processando' AND cancel_requested ORDER BY id LIMIT 1000"


def cancel_requests_sql(table: str) -> str:
    """Running attempts with a cancel request; ``table`` checked by the caller."""
    return _CANCEL_REQUESTS.format(table=table)


def ready_tasks_sql(table: str, now: str) -> str:
    """Whether a 'pendente' task or a scheduled retry is due; ``table`` checked by the caller,
    ``now`` the dialect's current-time expression."""
    return _READY_TASKS.format(table=table, now=now)
