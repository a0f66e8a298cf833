"""Fair shares: ``insert_task(..., fair_key="tenant-42")`` (docs/fleet-control.md).

Among ready tasks of equal ``prioridade``, claims rotate across fair keys, so a key with a
large backlog delays a key with a few tasks by about one round, not by its backlog.

A virtual round robin, decided at enqueue: a task with a fair key (and no ``data_hora`` of
its own) gets as ``data_hora`` its *turn*, one microsecond after the last ready task of its
key and prioridade, but never before the first ready task of that prioridade (a key with
no backlog, or one arriving late, joins the round being served, neither behind every
backlog nor ahead of it) and never after now (it is ready at once). Its n-th waiting task
is n microseconds after the head, so the claims, which take ready tasks in
``(prioridade DESC, data_hora, id)`` order, serve one task of each key per round. The
claims are unchanged: no column of theirs, no extra cost per claim, whatever the backlog.
Each stamp costs the enqueue two index look-ups (the key's last ready task; the first ready
task of its prioridade). ``data_hora_inicial`` keeps the real enqueue time.

What follows from it (docs/fleet-control.md):

- Tasks without a fair key are stamped as before (their enqueue time): among themselves,
  claim order is unchanged. Keyed tasks are stamped at or before their enqueue time, so a
  keyed task enqueued after an unkeyed one may be served first.
- A task with an explicit ``data_hora`` keeps it (scheduled tasks run when due).
- Two transactions enqueuing tasks of one key at the same time may give them equal turns
  (neither sees the other's rows): order within the turn is by id, the shares stay about
  even.
- Retries carry the fair key but are due at their back-off's end, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The fair_key column's size (varchar(200), as dedupe_key and lock_key).
FAIR_KEY_LIMIT = 200


def checked_fair_key(value: Any) -> str | None:
    """``value`` as a fair key (None: none); ``ValueError`` naming ``fair_key`` for anything
    but a non-empty string of at most 200 characters, before any SQL is sent."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"fair_key must be a string or None, got {type(value).__name__}")
    if not value:
        raise ValueError("fair_key must be a non-empty string or None")
    if len(value) > FAIR_KEY_LIMIT:
        raise ValueError(f"fair_key is longer than {FAIR_KEY_LIMIT} characters ({len(value)})")
    return value


def has_fair_key(row: Mapping[str, Any]) -> bool:
    """Whether the insert parameters (or insert_tasks item) ``row`` carry a fair key (the
    insert then names the fair_key column, and stamps the task's turn)."""
    return row.get("fair_key") is not None
