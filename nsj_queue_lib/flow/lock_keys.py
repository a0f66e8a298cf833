"""lock_key: tasks with equal keys never run at the same time, and start in claim order.

The claim decides, with one condition on each candidate row: a keyed row is
claimable only when no other row of its key is running ('processando') and
none comes before it in claim order among the ready rows. A row whose key is
busy is simply not a candidate (it holds no executor and is never claimed and
given back), and becomes one the moment the running row of its key leaves
'processando': at its commit, or when the retry service rescues the attempt
of a worker that died. The condition reads two indexes of the keyed rows
(``idx_<queue>_lock_key``, ``idx_<queue>_lock_key_running`` on PostgreSQL),
one entry each per keyed candidate, however many tasks a key has.

The same text serves every claim (PostgreSQL's claim function and socket-server
claim, MySQL's claim procedure and socket-server claim): ``{now}`` is the
dialect's clock expression and ``{row}`` the candidate's alias.
"""

from __future__ import annotations

# Two probes, each reading one index entry: is a task of the key running (an
# index of the running keyed rows), and is this row the first ready one of its
# key in claim order (the keyed ready rows, in claim order within a key).
_LOCK_KEY_FREE = (
    "({row}.lock_key IS NULL OR ("
    "NOT EXISTS (SELECT 1 FROM {table} AS held"
    " WHERE held.lock_key = {row}.lock_key AND held.status = 'processando')"
    " AND {row}.id = (SELECT head.id FROM {table} AS head"
    " WHERE head.lock_key = {row}.lock_key AND head.status = 'pendente' AND head.data_hora <= {now}"
    " ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1)))"
)


def lock_key_free(table: str, row: str, now: str) -> str:
    """SQL: the candidate ``row`` of ``table`` is not held back by its lock_key (all three
    arguments are identifiers or expressions of this library, never user input)."""
    return _LOCK_KEY_FREE.format(table=table, row=row, now=now)
