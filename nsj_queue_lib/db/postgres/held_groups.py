"""Commit groups that hold their tasks unwritten (QUEUE_ONE_WRITE, PostgreSQL).

A held claim (claim_query.sql) locks its rows and leaves them 'pendente'; the
group's transaction writes each task's outcome, its only write. The row lock
says "running" while the worker lives. What it cannot say is that a worker
died mid-group: its transaction rolls back and the tasks are simply ready
again, their attempt uncounted, so a task that kills its worker would run for
ever. Each such group therefore writes one row of its own (``<queue>_groups``)
on a second connection, the *ledger*, before its first handler runs, and
deletes it in its own commit. A row whose tasks are 'pendente' and locked by
nobody is a group whose worker is gone: the retry service writes those tasks
'processando' (``rescue_abandoned``) and its usual rescue then counts their
attempt, with their retry or dead letter.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from nsj_queue_lib.db.dialect import groups_table_name
from nsj_queue_lib.db.postgres.errors import wrap_driver_errors
from nsj_queue_lib.db.postgres.layout import HOT_DAY
from nsj_queue_lib.db.postgres.wire import PreparedRoundTrip
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.log import get_logger

logger = get_logger("group_commit")

# Rows the retry service looks at per run.
GROUPS_PER_RUN = 100


def held_group_sql(queue_table: str, partitioned: bool) -> dict[str, str]:
    """held_groups.sql for ``queue_table`` (a checked name): its statements of unfinished
    rows pinned to the hot partition on the partitioned layout."""
    hot = f"t.finished_day = {HOT_DAY} AND " if partitioned else ""
    values = {
        "queue_table": queue_table,
        "groups_table": groups_table_name(queue_table),
        "hot_t": hot,
    }
    return render_queries("postgres", values, "held_groups.sql")


def int_array(ids: Sequence[int]) -> str:
    """``ids`` as a PostgreSQL bigint[] literal."""
    return "{" + ",".join(str(int(i)) for i in ids) + "}"


class Ledger:
    """The worker's second connection, where its groups write their rows (autocommit; the
    table is unlogged: a row matters only while its worker lives, and a database crash
    that forgets one rolls its group back too).

    A row is sent without waiting for its reply, which the next one collects: the group's
    first handler does not wait for a round trip. Its key is made here, so that the
    group's commit can delete it without that reply. What was sent reaches the server
    even if the worker dies next (the kernel sends it before closing the socket; unread
    replies, which would make it reset the connection instead, are collected first)."""

    def __init__(self, connect: Callable[[], Any], sql: dict[str, str], worker: Callable[[], str]):
        self._connect = connect
        self._insert = sql["open_group"].encode()
        self._worker = worker
        self._lock = threading.Lock()  # one connection for every slot of the worker
        self._conn: Any = None
        self._unread = 0  # replies sent for and not yet read
        self._prefix = f"{os.getpid()}.{time.time_ns()}"
        self._count = itertools.count(1)

    def open(self, task_ids: Sequence[int]) -> str:
        """The group's row, sent; its key. Raises ``DatabaseError`` (a reply to an earlier
        row said it failed, or the connection broke)."""
        worker = self._worker()
        key = f"{worker}:{self._prefix}.{next(self._count)}"
        params = [key.encode(), worker.encode(), int_array(task_ids).encode()]
        with self._lock, wrap_driver_errors("commit group row"):
            try:
                pgconn = self._connection().pgconn
                self._collect(pgconn)
                pgconn.send_query_prepared(b"nsjq_group", params)
                self._unread += 1
            except (psycopg.Error, DatabaseError):
                self.close()  # a new connection next time
                raise
        return key

    def confirm(self) -> None:
        """The rows sent so far are in the table (their replies read): a group's commit, which
        deletes its row, must not come before its insert. Raises ``DatabaseError``."""
        with self._lock, wrap_driver_errors("commit group row"):
            if self._conn is None or not self._unread:
                return
            try:
                self._collect(self._conn.pgconn)
            except (psycopg.Error, DatabaseError):
                self.close()
                raise

    def _collect(self, pgconn: Any) -> None:
        failed = None
        while self._unread:
            result = pgconn.get_result()
            if result is None:
                self._unread -= 1
                continue
            if result.status != psycopg.pq.ExecStatus.COMMAND_OK:
                failed = (result.error_message or b"").decode("utf-8", "replace").strip()
        if failed is not None:
            raise DatabaseError(f"commit group row failed: {failed}")

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            conn = self._connect()
            conn.execute("SET synchronous_commit = off")
            prepared = conn.pgconn.prepare(b"nsjq_group", self._insert)
            if prepared.status != psycopg.pq.ExecStatus.COMMAND_OK:
                message = (prepared.error_message or b"").decode("utf-8", "replace").strip()
                conn.close()
                raise DatabaseError(f"commit group row failed: {message}")
            self._conn, self._unread = conn, 0
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass


def end_statement(sql: dict[str, str]) -> PreparedRoundTrip:
    """The group's end (held_groups.sql ``end_group``): $1 its row's id."""
    return PreparedRoundTrip(sql["end_group"], ("id",))


def write_statement(sql: dict[str, str]) -> PreparedRoundTrip:
    """Held tasks written 'processando' (held_groups.sql ``write_held``): $1 their ids."""
    return PreparedRoundTrip(sql["write_held"], ("id",))


def rescue_abandoned(conn: Any, sql: dict[str, str]) -> int:
    """The tasks of groups whose worker is gone written 'processando', in ``conn``'s
    transaction (the caller commits), and the rows of groups with nothing held left
    removed; how many tasks were written."""
    written = 0
    with wrap_driver_errors("abandoned commit groups"):
        groups = conn.execute(sql["groups_left"], {"limit": GROUPS_PER_RUN}).fetchall()
        for group_id, worker, task_ids, started_at in groups:
            ids = list(task_ids)
            params = {"ids": ids, "started_at": started_at, "worker": worker}
            written += conn.execute(sql["write_abandoned"], params).fetchone()[0]
            held = conn.execute(sql["group_still_held"], {"ids": ids}).fetchone()[0]
            if not held:
                conn.execute(sql["remove_group"], {"id": group_id})
    return written


class AbandonedGroups:
    """The retry service's first step on PostgreSQL (``rescue_abandoned``), once the table is
    known to have its groups table (a schema before db_gen --upgrade has none: nothing to
    do, and no worker of it can hold tasks)."""

    def __init__(self, store: Any):
        self.store = store
        self._sql: dict[str, str] | None = None
        self._present: bool | None = None

    def __call__(self, conn: Any) -> int:
        if self._present is None:
            table = groups_table_name(self.store.queue_table)
            with wrap_driver_errors("abandoned commit groups"):
                found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
            self._present = bool(found[0])
        if not self._present:
            return 0
        if self._sql is None:
            self._sql = held_group_sql(self.store.queue_table, self.store.partitioned)
        return rescue_abandoned(conn, self._sql)
