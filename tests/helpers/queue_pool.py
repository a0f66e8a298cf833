"""One queue per xdist worker and kind for the store and contract suites, emptied between tests.

Creating a queue is most of what a store test costs: db_gen's script is some 40 statements
(tables, indexes, routines, triggers), 0.1-0.25 s on each server, and its DROP another
0.02-0.05 s, in each of the store suite's 670 tests and the contract suite's 360. A test
changes rows far more often than the schema, so a worker keeps the queue it made for a
kind and, after each test, either

- empties it (``DELETE``; ids from 1 again, as on a fresh queue, except on MariaDB in the
  contract suite: tests/contract/backends.py says why) when its catalog is still the one
  it was made with, and the test's threads and sessions have ended, or
- drops it, when the test changed anything of it (a column, an index, a partition, a
  routine, a trigger, a grant, a comment, a table added or removed: ``*_fingerprint``); the
  next test then gets a fresh queue.

Emptied, a queue keeps dead rows and index entries (until vacuum or purge) and its
statistics: a test that counts index reads, reads plans or statistics counters is marked
``@pytest.mark.fresh_queue`` and gets a queue of its own. ``NSJQ_FRESH_QUEUES=1`` gives
every test a fresh one, as before the pool.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.helpers import databases
from tests.helpers import mysql_queue as mysql_helpers

# Not a catalog change: the next id MariaDB prints in SHOW CREATE TABLE.
_AUTO_INCREMENT = re.compile(r" AUTO_INCREMENT=\d+")

_PG_FINGERPRINT = r"""
WITH rels AS (
    SELECT c.oid, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relname >= %(name)s::name AND c.relname < %(upper)s::name
      AND (c.relname = %(name)s OR starts_with(c.relname, %(name)s || '_'))
)
SELECT item FROM (
    SELECT format('rel %%s %%s %%s %%s %%s %%s %%s', c.relname, c.relkind, c.reloptions, c.relacl,
                  c.relowner, obj_description(c.oid, 'pg_class'),
                  pg_get_expr(c.relpartbound, c.oid)) AS item
    FROM pg_class c JOIN rels r ON r.oid = c.oid
    UNION ALL
    SELECT format('col %%s %%s %%s %%s %%s %%s', r.relname, a.attname,
                  format_type(a.atttypid, a.atttypmod), a.attnotnull,
                  pg_get_expr(d.adbin, d.adrelid), a.attacl)
    FROM pg_attribute a JOIN rels r ON r.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT format('idx %%s %%s', pg_get_indexdef(i.indexrelid), i.indisvalid)
    FROM pg_index i JOIN rels r ON r.oid = i.indrelid
    UNION ALL
    SELECT format('con %%s %%s %%s', r.relname, o.conname, pg_get_constraintdef(o.oid))
    FROM pg_constraint o JOIN rels r ON r.oid = o.conrelid
    UNION ALL
    SELECT format('trg %%s %%s', pg_get_triggerdef(t.oid), t.tgenabled)
    FROM pg_trigger t JOIN rels r ON r.oid = t.tgrelid WHERE NOT t.tgisinternal
    UNION ALL
    SELECT format('dep %%s %%s', d.classid::regclass, d.objid)
    FROM pg_depend d JOIN rels r ON r.oid = d.refobjid AND d.refclassid = 'pg_class'::regclass
    WHERE d.classid = 'pg_rewrite'::regclass
    UNION ALL
    SELECT format('fn %%s %%s %%s %%s', p.oid::regprocedure, md5(pg_get_functiondef(p.oid)),
                  obj_description(p.oid, 'pg_proc'), p.proacl)
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = %(schema)s AND p.proname LIKE %(within)s
) AS items
ORDER BY item
"""


def _like_escape(name: str) -> str:
    return name.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%")


def _pg_params(queue: databases.PgQueue) -> dict[str, str]:
    # The queue's relations by an index range, not LIKE 'q\_...%', whose fixed prefix is
    # "q" alone: that range of pg_class's name index held some 100,000 entries here, most
    # of them dead versions left by the suites' churn of tables (20 ms instead of 0.1).
    return {
        "schema": queue.schema,
        "name": queue.name,
        "upper": f"{queue.name}~",  # after every "<name>_..." (identifiers are [a-z0-9_])
        "within": f"%{_like_escape(queue.name)}%",
    }


def pg_fingerprint(admin: Any, queue: databases.PgQueue) -> str:
    """A digest of every catalog entry of the queue: its tables (and partitions, sequences),
    columns, indexes, constraints, triggers, views on it, routines, grants and comments."""
    rows = admin.execute(_PG_FINGERPRINT, _pg_params(queue)).fetchall()
    return hashlib.sha256("\n".join(str(row[0]) for row in rows).encode()).hexdigest()


def pg_empty(admin: Any, queue: databases.PgQueue) -> None:
    """Every row of the queue's tables deleted, its sequences restarted: DELETE, not
    TRUNCATE, which cost as much as a new queue (a new file per table and index)."""
    [(tables, sequences)] = admin.execute(
        "WITH rels AS ("
        + _PG_FINGERPRINT.split("WITH rels AS (", 1)[1].split(")\nSELECT item", 1)[0]
        + ") SELECT array_agg(format('%%I.%%I', %(schema)s, c.relname)) "
        "FILTER (WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition), "
        "array_agg(format('%%I.%%I', %(schema)s, c.relname)) FILTER (WHERE c.relkind = 'S') "
        "FROM pg_class c JOIN rels r ON r.oid = c.oid",
        _pg_params(queue),
    ).fetchall()
    statements = [f"DELETE FROM {table}" for table in tables or ()]
    statements += [f"SELECT setval('{sequence}', 1, false)" for sequence in sequences or ()]
    admin.execute(";".join(statements))


def _mysql_rows(admin: Any, sql: str, args: Any = None) -> list[tuple]:
    with admin.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def mysql_tables(admin: Any, queue: mysql_helpers.MysqlQueue) -> list[str]:
    rows = _mysql_rows(
        admin,
        f"SHOW FULL TABLES FROM {queue.database} LIKE %s",
        (f"{_like_escape(queue.name)}%",),
    )
    names = (str(row[0]) for row in rows)
    return sorted(n for n in names if n == queue.name or n.startswith(f"{queue.name}_"))


def mysql_fingerprint(admin: Any, queue: mysql_helpers.MysqlQueue) -> str:
    """As ``pg_fingerprint``, from SHOW CREATE TABLE (partitions included), the triggers,
    the routines and the grants of the queue's tables and routines."""
    items: list[str] = []
    for table in mysql_tables(admin, queue):
        [(_, create, *_)] = _mysql_rows(admin, f"SHOW CREATE TABLE {queue.database}.{table}")
        items.append(_AUTO_INCREMENT.sub("", str(create)))
    items += sorted(
        repr(row[:6])
        for row in _mysql_rows(
            admin,
            f"SHOW TRIGGERS FROM {queue.database} LIKE %s",
            (f"{_like_escape(queue.name)}%",),
        )
    )
    # mysql.proc, not information_schema.ROUTINES: 1 ms instead of 50.
    within = f"%{_like_escape(queue.name)}%"
    for sql in (
        "SELECT name, type, md5(body), comment, sql_mode, security_type, definer "
        "FROM mysql.proc WHERE db = %s AND name LIKE %s",
        "SELECT User, Host, Table_name, Table_priv, Column_priv FROM mysql.tables_priv "
        "WHERE Db = %s AND Table_name LIKE %s",
        "SELECT User, Host, Routine_name, Proc_priv FROM mysql.procs_priv "
        "WHERE Db = %s AND Routine_name LIKE %s",
    ):
        items += sorted(repr(row) for row in _mysql_rows(admin, sql, (queue.database, within)))
    return hashlib.sha256("\n".join(items).encode()).hexdigest()


def mysql_empty(admin: Any, queue: mysql_helpers.MysqlQueue, restart_ids: bool = True) -> None:
    """Every row of the queue's tables deleted, AUTO_INCREMENT back to 1 where it moved
    (unless not ``restart_ids``): DELETE, not TRUNCATE, which rebuilds the table (40 ms
    for a partitioned one)."""
    with admin.cursor() as cur:
        for table in mysql_tables(admin, queue):
            name = f"{queue.database}.{table}"
            cur.execute(f"DELETE FROM {name}")
            if not restart_ids:
                continue
            cur.execute(f"SHOW CREATE TABLE {name}")
            if _AUTO_INCREMENT.search(str(cur.fetchone()[1])):
                cur.execute(f"ALTER TABLE {name} AUTO_INCREMENT = 1")


def threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def threads_ended(before: set[threading.Thread], timeout: float = 2) -> bool:
    """Whether the threads a test started (alive now, not in ``before``) end within
    ``timeout`` seconds. One still running after its test may still use the queue, with
    locks the next test would wait for or find its tasks under: a fresh queue then."""
    deadline = time.monotonic() + timeout
    while any(t.is_alive() for t in threads() - before):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def session_id(conn: Any) -> int | None:
    """The server's id of ``conn``'s session (no round trip), None if unknown."""
    for read in (
        lambda: conn.info.backend_pid,  # psycopg 3
        lambda: conn.get_backend_pid(),  # psycopg2
        lambda: conn.thread_id(),  # PyMySQL
    ):
        try:
            found = read()
        except Exception:  # not this driver's, or closed
            continue
        if isinstance(found, int):
            return found
    return None


_PG_HELD = """
SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%(pids)s)
UNION ALL
SELECT count(*) FROM pg_locks l
WHERE l.pid <> pg_backend_pid() AND (
    (l.locktype = 'advisory' AND l.classid = to_regclass(%(table)s)::oid)
    OR l.relation = to_regclass(%(table)s))
"""


def sessions_ended(
    admin: Any, queue: Any, ids: list[int], postgres: bool, timeout: float = 5
) -> bool:
    """Whether, within ``timeout`` seconds, the sessions ``ids`` the test closed have ended
    on the server (it ends them a little after the client closed them) and, on PostgreSQL,
    no session holds a lock of the queue. Its next test keys its advisory locks, and
    MariaDB its GET_LOCK names, as this one did, where a fresh queue had new keys: when
    they are still held (a session the test left open), the queue is dropped instead."""
    deadline = time.monotonic() + timeout
    while True:
        if postgres:
            rows = admin.execute(_PG_HELD, {"pids": ids, "table": queue.table}).fetchall()
            left = sum(int(row[0]) for row in rows)
        elif ids:
            marks = ", ".join(["%s"] * len(ids))
            left = int(
                _mysql_rows(
                    admin,
                    f"SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID IN ({marks})",
                    ids,
                )[0][0]
            )
        else:
            left = 0
        if not left:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)


class QueueWays:
    """How a pool makes, looks at, empties and drops a queue of one kind: ``postgres``,
    ``partitioned`` (PostgreSQL's layouts), ``mysql`` or ``mysql-partitioned``; the
    partitioned ones with ``databases.FEW_DAYS_AHEAD`` days ahead."""

    def __init__(self, kind: str, admin: Any, connect_args: Any, restart_ids: bool = True):
        self.kind, self.admin, self.connect_args = kind, admin, connect_args
        self.postgres = kind in ("postgres", "partitioned")
        self.restart_ids = restart_ids
        self.sessions: list[int] = []  # the test's sessions (session_id), waited for

    def make(self) -> Any:
        layout = "partitioned" if self.kind.endswith("partitioned") else "plain"
        days = databases.FEW_DAYS_AHEAD
        if self.postgres:
            return databases.create_queue(self.admin, self.connect_args, layout=layout, days=days)
        return mysql_helpers.create_queue(
            self.admin, self.connect_args["database"], layout=layout, days=days
        )

    def fingerprint(self, queue: Any) -> str:
        if self.postgres:
            return pg_fingerprint(self.admin, queue)
        return mysql_fingerprint(self.admin, queue)

    def empty(self, queue: Any) -> bool:
        if not sessions_ended(self.admin, queue, self.sessions, self.postgres):
            return False
        if self.postgres:
            pg_empty(self.admin, queue)
        else:
            mysql_empty(self.admin, queue, self.restart_ids)
        return True

    def drop(self, queue: Any) -> None:
        if self.postgres:
            databases.drop_queue(self.admin, queue)
        else:
            mysql_helpers.drop_queue_tables(self.admin, queue.database, queue.name)


class QueuePool:
    """The queues of one xdist worker, by kind (``take``/``give_back``)."""

    def __init__(self) -> None:
        # kind -> (the queue, its fingerprint when made)
        self.kept: dict[str, tuple[Any, str]] = {}
        self.fresh_only = os.environ.get("NSJQ_FRESH_QUEUES", "") not in ("", "0")

    def take(self, kind: str, make: Callable[[], Any], fingerprint: Callable[[Any], str]) -> Any:
        kept = self.kept.get(kind)
        if kept is not None:
            return kept[0]
        queue = make()
        self.kept[kind] = (queue, fingerprint(queue))
        return queue

    def give_back(
        self,
        kind: str,
        fingerprint: Callable[[Any], str],
        empty: Callable[[Any], bool],
        drop: Callable[[Any], None],
    ) -> None:
        """After a test: the queue emptied for the next one, or dropped (see the module);
        ``empty`` returns False when the queue cannot be reused."""
        queue, made = self.kept.pop(kind)
        if fingerprint(queue) == made:
            try:
                reused = empty(queue)
            except Exception:
                drop(queue)
                raise
            if reused:
                self.kept[kind] = (queue, made)
                return
        drop(queue)
