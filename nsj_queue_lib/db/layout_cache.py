"""Whether a queue table has the partitioned layout, as a client learns it (MySQL/MariaDB).

A worker learns its table's layout when it binds its store. A client (QueueClient, and the
statements of workflows, steps and events that a caller or a handler runs) learns it here,
once per table and server in a process: on MySQL's partitioned layout its statements by
task id must name the hot partition, because a locking statement that searches ``id``
alone (not the whole key, ``(id, finished_day)``) also locks the gap after the row, and for
the newest task that gap is where every insert goes (db/latest_attempt.py).

A partitioned table stays partitioned; a plain one is looked at again after a minute, since
``db_gen --upgrade --layout partitioned`` may move it while clients run.
"""

from __future__ import annotations

from time import monotonic
from typing import Any

from nsj_queue_lib.db.sql_files import load_queries
from nsj_queue_lib.identifiers import split_table_name

PLAIN_RECHECK_SECONDS = 60.0
# The pins of a statement of unfinished rows to the hot partition, for the {hot} and
# {hot_t} placeholders (db/<dialect>/layout.py: the hot partition's key is 1).
HOT_PINS = {"hot": "finished_day = 1 AND ", "hot_t": "t.finished_day = 1 AND "}
NO_PINS = {"hot": "", "hot_t": ""}

# (dialect, server, database, table) -> (partitioned, when looked up: monotonic seconds)
_known: dict[tuple[Any, ...], tuple[bool, float]] = {}


def probe(conn: Any, dialect: str, queue_table: str) -> bool:
    """Ask the server, now: whether ``queue_table`` is partitioned."""
    schema, table = split_table_name(queue_table)
    sql = load_queries(dialect, "by_task_id.sql")["layout"]
    with conn.cursor() as cur:
        cur.execute(sql, {"schema": schema, "table": table})
        return bool(cur.fetchone()[0])


def partitioned(conn: Any, dialect: str, queue_table: str) -> bool:
    """Whether ``queue_table`` is partitioned, from this process's cache when it knows."""
    # An unqualified name is the connection's database's table (PyMySQL's ``db``). A
    # connection that does not say where it goes is its own server: a wrong answer would
    # pin a plain table's statements to a column it lacks.
    where = tuple(getattr(conn, name, None) for name in ("host", "port", "unix_socket", "db"))
    if where[0] is None and where[2] is None:
        where = (*where, id(conn))
    key = (dialect, *where, queue_table)
    now = monotonic()
    found = _known.get(key)
    if found is not None and (found[0] or now - found[1] < PLAIN_RECHECK_SECONDS):
        return found[0]
    answer = probe(conn, dialect, queue_table)
    _known[key] = (answer, now)
    return answer
