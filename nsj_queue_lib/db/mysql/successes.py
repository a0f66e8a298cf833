"""The one statement that writes 'sucesso' on MySQL/MariaDB outside the claim procedure.

A commit group's end, a completion under the socket server's lock and a lost
group's recovery all write their successes with it: one UPDATE for any number
of tasks, conditional on each row still being 'processando' (the fence: fewer
rows changed than expected means another worker rescued a task).

The statement is text, not parameters: PyMySQL escaping each of a group's ids
and messages costs the worker more than the statement costs the server
(docs/benchmarks.md). Ids are the table's own BIGINTs, validated by int();
messages go through the connection's own escaping (its charset and sql_mode),
once per distinct message.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from nsj_queue_lib.db.mysql.layout import FINISHED_DAY_NOW, hot_pin


def success_sql(
    conn: Any, queue_table: str, written: Sequence[tuple[int, str]], partitioned: bool = False
) -> str:
    """'sucesso' and each task's mensagem for the tasks of ``written`` (ids with their
    mensagem) still running. ``partitioned``: the rows are looked for in the hot partition
    alone, and moved to today's (db/mysql/layout.py)."""
    day, pin = (f", finished_day = {FINISHED_DAY_NOW}", hot_pin()) if partitioned else ("", "")
    return (
        f"UPDATE {queue_table} SET status = 'sucesso', "
        f"mensagem = {mensagem_by_id(conn, written)}, finished_at = NOW(6){day} "
        f"WHERE {pin}id IN ({id_list([task_id for task_id, _ in written])}) "
        "AND status = 'processando'"
    )


def id_list(ids: Iterable[Any]) -> str:
    return ", ".join([str(int(task_id)) for task_id in ids])


def mensagem_by_id(conn: Any, written: Sequence[tuple[int, str]]) -> str:
    """The SQL expression giving each written task its mensagem: the literal itself when
    they are all equal (the usual case), else a CASE over the ids grouped by mensagem
    (cheaper for server and worker than ELT(FIELD(...)) over every id)."""
    distinct = {mensagem for _, mensagem in written}  # no call per task: most are equal
    if len(distinct) == 1:
        return str(conn.escape(distinct.pop()))
    ids_by_mensagem: dict[str, list[int]] = {}
    for task_id, mensagem in written:
        ids_by_mensagem.setdefault(mensagem, []).append(task_id)
    *others, (last, _) = ids_by_mensagem.items()
    whens = " ".join(
        f"WHEN id IN ({id_list(ids)}) THEN {conn.escape(mensagem)}" for mensagem, ids in others
    )
    return f"CASE {whens} ELSE {conn.escape(last)} END"
