"""A populated plain queue table becomes the partitioned layout while workers run (PostgreSQL).

docs/internals/storage.md, "Migrating a populated table". The plain table becomes the
``legacy`` partition ``[MINVALUE, 1)`` of a new partitioned table under the queue's name:
its history is not copied, only its unfinished rows move to the hot partition. The steps:

1. **Online** (no lock that stops workers for longer than ``lock_timeout``):
   ``finished_day`` is added with the default 0 (no rewrite); the unique indexes the
   partitioned table needs (they hold ``finished_day``) are built ``CONCURRENTLY``; a
   ``CHECK (finished_day < 1)`` is added ``NOT VALID`` and then validated, so that the
   attach below does not scan the table.
2. **The swap**, one transaction that waits at most ``lock_timeout`` for the table and is
   retried: the old table is renamed ``<queue>_legacy`` and its indexes get names of their
   own; the partitioned table is created under the queue's name, with its ids drawn from
   the old sequence; the old table is attached (its indexes become the new ones'
   partitions: nothing is built); the unfinished rows move to the hot partition (each
   status through its own partial index); the claim routines are re-created for the new
   row type; owner, grants and the 1.2.2 index are carried over; and the table's comment
   records the old table's oid, which stays the key of the queue's advisory locks, so that
   workers bound before and after the swap see each other's running tasks.
3. **Afterwards** the purge service deletes the legacy partition's expired rows in rounds
   and drops it once empty (retention.py).

Workers running through the swap wait for it (their statements queue behind the lock),
then resolve the queue's name to the new table: PostgreSQL re-analyses a cached plan whose
table changed. A run that stops half-way can be started again: every step checks what is
done.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from nsj_queue_lib.db.dialect import DdlNames
from nsj_queue_lib.db.postgres import retention
from nsj_queue_lib.db.postgres.dialect import PostgresDialect
from nsj_queue_lib.db.postgres.layout import (
    HOT_DAY,
    LOCK_KEY_NOTE,
    hot_partition,
    layout_values,
    lock_key_of,
)
from nsj_queue_lib.db.sql_files import read_sql, render
from nsj_queue_lib.exceptions import DatabaseError

# The suffix of the old table once it is the legacy partition.
LEGACY_SUFFIX = "_legacy"
UNFINISHED = ("pendente", "agendada", "processando", "aguardando")
# A sequence name as pg_get_serial_sequence gives it for a plainly named table.
_SEQUENCE = re.compile(r"^[a-z_][a-z0-9_$]*\.[a-z_][a-z0-9_$]*$")
_UNIQUE_INDEX = re.compile(r"CREATE UNIQUE INDEX IF NOT EXISTS (\w+) ON \S+ (\(.*\));")
_INDEX_DEF = re.compile(r"^CREATE (UNIQUE )?INDEX (\S+) ON (?:ONLY )?\S+ (USING .*)$")


class MigrationRefused(DatabaseError):
    """The table has something the migration would break (a view, a foreign key...)."""


@dataclass(frozen=True)
class MigrationReport:
    moved: int  # unfinished rows moved to the hot partition
    legacy_rows: int  # the legacy partition's rows (estimated)
    swap_attempts: int
    swap_seconds: float  # the successful swap's transaction, lock wait included


def legacy_name(queue: str) -> str:
    return f"{queue}{LEGACY_SUFFIX}"


def migrate(
    conn: psycopg.Connection,
    names: DdlNames,
    lock_timeout_s: float = 5.0,
    attempts: int = 30,
    pause_s: float = 1.0,
    say: Callable[[str], None] = lambda text: None,
) -> MigrationReport | None:
    """Move ``names``' plain table to the partitioned layout; None when it is partitioned
    already. ``conn`` must be in autocommit mode (concurrent index builds need it)."""
    if not conn.autocommit:
        raise ValueError("the migration needs an autocommit connection")
    table = f"{names.schema}.{names.queue}"
    oid, kind = _table(conn, table)
    if kind == "p":
        return None
    if kind != "r":
        raise MigrationRefused(f"{table} is not a table (relkind {kind!r})")
    _refuse_what_breaks(conn, names, oid)
    say(f"{table}: db_gen --upgrade (plain layout)")
    _retrying(conn, PostgresDialect().upgrade_ddl(names), lock_timeout_s, attempts, pause_s)
    say(f"{table}: preparing the legacy partition (online)")
    _prepare(conn, names, oid, lock_timeout_s, attempts, pause_s)
    say(f"{table}: swapping in the partitioned table")
    moved, tries, swap_seconds = _swap_retried(
        conn, names, oid, lock_timeout_s, attempts, pause_s, say
    )
    retention.attach_days_ahead(conn, table)
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(names.schema, names.queue)))
    legacy = f"{names.schema}.{legacy_name(names.queue)}"
    [(estimate,)] = conn.execute(
        "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", (legacy,)
    ).fetchall()
    legacy_rows = max(int(estimate), 0)
    say(f"{table}: partitioned; {moved} unfinished rows moved, {legacy_rows} kept in {legacy}")
    return MigrationReport(moved, legacy_rows, tries, swap_seconds)


def _swap_retried(
    conn: Any,
    names: DdlNames,
    oid: int,
    lock_timeout_s: float,
    attempts: int,
    pause_s: float,
    say: Callable[[str], None],
) -> tuple[int, int, float]:
    """The swap, tried until it gets the table: (rows moved, tries, its seconds)."""
    started = time.monotonic()
    for tries in range(1, attempts + 1):
        began = time.monotonic()
        try:
            with conn.transaction():
                moved = _swap(conn, names, oid, lock_timeout_s)
            return moved, tries, time.monotonic() - began
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected) as exc:
            say(
                f"{names.schema}.{names.queue}: the swap waited too long for the table ({exc}); again"
            )
            time.sleep(pause_s)
    raise DatabaseError(
        f"{names.schema}.{names.queue}: the swap could not lock the table in {attempts} tries "
        f"({time.monotonic() - started:.0f} s): a long transaction holds it; nothing changed, "
        f"run the migration again"
    )


def _table(conn: Any, table: str) -> tuple[int, str]:
    row = conn.execute(
        "SELECT c.oid::bigint, c.relkind FROM pg_class AS c WHERE c.oid = to_regclass(%s)",
        (table,),
    ).fetchone()
    if row is None:
        raise MigrationRefused(f"table {table} does not exist")
    return int(row[0]), str(row[1])


def _ours(names: DdlNames) -> tuple[str, ...]:
    """Prefixes of the routines db_gen makes for this queue (their row type is the table's)."""
    return (f"claim_next_{names.queue}", f"claim_limited_{names.queue}", f"settle_{names.queue}")


def _refuse_what_breaks(conn: Any, names: DdlNames, oid: int) -> None:
    """What would keep pointing at the old table, or stop the attach: said before anything
    changes."""
    problems: list[str] = []
    views = conn.execute(
        "SELECT DISTINCT v.relnamespace::regnamespace::text || '.' || v.relname FROM pg_depend AS d "
        "JOIN pg_rewrite AS r ON r.oid = d.objid JOIN pg_class AS v ON v.oid = r.ev_class "
        "WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass "
        "AND d.refobjid = %s AND v.oid <> %s",
        (oid, oid),
    ).fetchall()
    problems += [f"view {view} reads it (drop it, migrate, create it again)" for (view,) in views]
    keys = conn.execute(
        "SELECT conname FROM pg_constraint WHERE contype = 'f' AND (conrelid = %s OR confrelid = %s)",
        (oid, oid),
    ).fetchall()
    problems += [f"foreign key {name}" for (name,) in keys]
    if conn.execute(
        "SELECT 1 FROM pg_inherits WHERE inhrelid = %s OR inhparent = %s", (oid, oid)
    ).fetchone():
        problems.append("it takes part in table inheritance")
    own_unique = {names.object_names()[k] for k in ("idx_dedupe", "idx_lock_key_running")}
    uniques = conn.execute(
        "SELECT c.relname FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = %s AND i.indisunique AND NOT i.indisprimary",
        (oid,),
    ).fetchall()
    problems += [
        f"unique index {name} (a partitioned table's unique index must hold finished_day)"
        for (name,) in uniques
        if name not in own_unique and not name.startswith(_prebuilt_prefix(oid))
    ]
    functions = conn.execute(
        "SELECT p.proname, p.oid::regprocedure::text FROM pg_depend AS d "
        "JOIN pg_proc AS p ON p.oid = d.objid "
        "WHERE d.classid = 'pg_proc'::regclass AND d.refclassid = 'pg_type'::regclass "
        "AND d.refobjid = (SELECT reltype FROM pg_class WHERE oid = %s)",
        (oid,),
    ).fetchall()
    problems += [
        f"function {signature} uses its row type"
        for name, signature in functions
        if not name.startswith(_ours(names))
    ]
    if problems:
        raise MigrationRefused(
            f"{names.schema}.{names.queue} cannot move to the partitioned layout: "
            + "; ".join(problems)
        )
    sequence = _sequence(conn, f"{names.schema}.{names.queue}")
    if sequence is None:
        raise MigrationRefused(
            f"{names.schema}.{names.queue}.id draws from no sequence of a plain name"
        )


def _sequence(conn: Any, table: str) -> str | None:
    row = conn.execute("SELECT pg_get_serial_sequence(%s, 'id')", (table,)).fetchone()
    found = row[0] if row else None
    return found if found and _SEQUENCE.match(found) else None


def _prebuilt_prefix(oid: int) -> str:
    """The legacy partition's own index names (unique per table, short whatever the queue)."""
    return f"nsjq_legacy{oid}_"


def _retrying(conn: Any, statement: Any, lock_timeout_s: float, attempts: int, pause_s: float):
    """One statement that takes a strong lock briefly, waiting at most ``lock_timeout_s``."""
    for _ in range(attempts):
        try:
            with conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = '{int(lock_timeout_s * 1000)}ms'")
                conn.execute(statement)
            return
        except psycopg.errors.LockNotAvailable:
            time.sleep(pause_s)
    raise DatabaseError(f"gave up after {attempts} lock waits: {statement}")


def _prepare(
    conn: Any, names: DdlNames, oid: int, lock_timeout_s: float, attempts: int, pause_s: float
) -> None:
    table = sql.Identifier(names.schema, names.queue)
    # With a constant default: a catalog change, no rewrite (PostgreSQL 11+).
    _retrying(
        conn,
        sql.SQL(
            "ALTER TABLE {} ADD COLUMN IF NOT EXISTS finished_day integer NOT NULL DEFAULT 0"
        ).format(table),
        lock_timeout_s,
        attempts,
        pause_s,
    )
    prefix = _prebuilt_prefix(oid)
    with _no_lock_timeout(conn):
        # A concurrent build waits for every transaction that could still see the table
        # as it was (anywhere in the database), and blocks no worker meanwhile.
        for name, columns in _unique_indexes(names):
            _build_concurrently(conn, names.schema, f"{prefix}{name}", table, columns)
    check = f"{prefix}days"
    if not conn.execute(
        "SELECT 1 FROM pg_constraint WHERE conrelid = %s AND conname = %s", (oid, check)
    ).fetchone():
        _retrying(
            conn,
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} CHECK (finished_day < {}) NOT VALID").format(
                table, sql.Identifier(check), sql.Literal(HOT_DAY)
            ),
            lock_timeout_s,
            attempts,
            pause_s,
        )
    # A scan under SHARE UPDATE EXCLUSIVE: workers go on.
    with _no_lock_timeout(conn):
        conn.execute(
            sql.SQL("ALTER TABLE {} VALIDATE CONSTRAINT {}").format(table, sql.Identifier(check))
        )


@contextlib.contextmanager
def _no_lock_timeout(conn: Any) -> Iterator[None]:
    """The steps that block no worker wait as long as they must; the session's setting
    (the caller's connection) is put back afterwards."""
    [(before,)] = conn.execute("SELECT current_setting('lock_timeout')").fetchall()
    conn.execute("SET lock_timeout = 0")
    try:
        yield
    finally:
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (before,))


def _unique_indexes(names: DdlNames) -> list[tuple[str, str]]:
    """(short name, column list and predicate) of the partitioned table's unique indexes:
    its primary key, and those of indexes.sql (they hold finished_day)."""
    values = names.template_values()
    values.update(layout_values(True, values))
    text = render(read_sql("postgres", "indexes.sql"), values)
    found = [("pk", "(id, finished_day)")]
    for name, definition in _UNIQUE_INDEX.findall(text):
        found.append((name.removeprefix(f"idx_{names.queue}_"), definition))
    return found


def _build_concurrently(conn: Any, schema: str, name: str, table: Any, columns: str) -> None:
    valid = conn.execute(
        "SELECT i.indisvalid FROM pg_index AS i WHERE i.indexrelid = to_regclass(%s)",
        (f"{schema}.{name}",),
    ).fetchone()
    if valid is not None and valid[0]:
        return
    index = sql.Identifier(schema, name)
    if valid is not None:  # an interrupted build left it invalid
        conn.execute(sql.SQL("DROP INDEX CONCURRENTLY {}").format(index))
    conn.execute(
        sql.SQL("CREATE UNIQUE INDEX CONCURRENTLY {} ON {} ").format(sql.Identifier(name), table)
        + sql.SQL(columns)  # from this package's indexes.sql, not from input
    )


@dataclass(frozen=True)
class _OldTable:
    """What the swap carries over from the plain table, read once it is locked."""

    owner: str
    comment: str | None
    grants: list[tuple[str, str]]
    indexes: list[tuple[str, str, bool]]  # name, definition, unique
    functions: list[str]  # our routines that take its row type
    sequence: str


def _read_old_table(conn: Any, names: DdlNames, oid: int) -> _OldTable:
    owner, comment = conn.execute(
        "SELECT pg_get_userbyid(relowner), obj_description(oid, 'pg_class') FROM pg_class "
        "WHERE oid = %s",
        (oid,),
    ).fetchone()
    grants = conn.execute(
        "SELECT coalesce(pg_get_userbyid(nullif(a.grantee, 0)), 'PUBLIC'), a.privilege_type "
        "FROM pg_class AS c, aclexplode(c.relacl) AS a "
        "WHERE c.oid = %s AND a.grantee <> c.relowner",
        (oid,),
    ).fetchall()
    indexes = conn.execute(
        "SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisunique "
        "FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = %s ORDER BY c.relname",
        (oid,),
    ).fetchall()
    functions = conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_depend AS d JOIN pg_proc AS p ON p.oid = d.objid "
        "WHERE d.classid = 'pg_proc'::regclass AND d.refclassid = 'pg_type'::regclass "
        "AND d.refobjid = (SELECT reltype FROM pg_class WHERE oid = %s)",
        (oid,),
    ).fetchall()
    sequence = _sequence(conn, f"{names.schema}.{names.queue}")
    assert sequence is not None  # checked before the online steps
    return _OldTable(owner, comment, grants, indexes, [f for (f,) in functions], sequence)


def _swap(conn: Any, names: DdlNames, oid: int, lock_timeout_s: float) -> int:
    """The transaction that puts the partitioned table in the plain one's place; the
    unfinished rows it moved."""
    table = sql.Identifier(names.schema, names.queue)
    conn.execute(f"SET LOCAL lock_timeout = '{int(lock_timeout_s * 1000)}ms'")
    conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
    old = _read_old_table(conn, names, oid)
    kept_indexes = _retire(conn, names, oid, old)
    _create_partitioned(conn, names, old.sequence, kept_indexes)
    moved = _move_backlog(conn, names)
    _carry_ownership(conn, names.schema, names.queue, old.owner, old.grants)
    note = f"{LOCK_KEY_NOTE}{oid}"
    kept = (old.comment or "").replace(f"{LOCK_KEY_NOTE}{lock_key_of(old.comment)}", "").strip()
    conn.execute(
        sql.SQL("COMMENT ON TABLE {} IS {}").format(
            table, sql.Literal(f"{kept}\n{note}" if kept else note)
        )
    )
    return moved


def _retire(conn: Any, names: DdlNames, oid: int, old: _OldTable) -> list[tuple[str, str]]:
    """The plain table becomes ``<queue>_legacy``, ready to be attached: its indexes renamed,
    its notify trigger and our routines of its row type dropped. The indexes to create on
    the new table under their names (name, what follows ``ON <table>``): the 1.2.2 marker
    index (legacy_keys.py) and the user's own."""
    schema, legacy = names.schema, legacy_name(names.queue)
    legacy_table = sql.Identifier(schema, legacy)
    prefix = _prebuilt_prefix(oid)
    conn.execute(
        sql.SQL("ALTER TABLE {} RENAME TO {}").format(
            sql.Identifier(schema, names.queue), sql.Identifier(legacy)
        )
    )
    ours = set(names.object_names().values())
    recreate: list[tuple[str, str]] = []
    for number, (name, definition, unique) in enumerate(old.indexes):
        if name.startswith(prefix):
            continue
        conn.execute(
            sql.SQL("ALTER INDEX {} RENAME TO {}").format(
                sql.Identifier(schema, name), sql.Identifier(f"{prefix}{number}")
            )
        )
        parsed = _INDEX_DEF.match(definition)
        if name not in ours and not unique and parsed:
            recreate.append((name, parsed.group(3)))
    # Its notify trigger, and wait_for_task's end trigger with its function (the
    # partitioned layout has none: a task's end moves its row, and waits poll).
    for trigger in ("trigger_name", "end_trigger"):
        conn.execute(
            sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(
                sql.Identifier(names.object_names()[trigger]), legacy_table
            )
        )
    conn.execute(
        sql.SQL("DROP FUNCTION IF EXISTS {}()").format(
            sql.Identifier(schema, names.object_names()["end_function"])
        )
    )
    for signature in old.functions:
        conn.execute(f"DROP FUNCTION {signature}")  # the catalog's text of our routines
    # The parent's primary key adopts a constraint's index only.
    conn.execute(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} UNIQUE USING INDEX {}").format(
            legacy_table, sql.Identifier(f"{prefix}pk"), sql.Identifier(f"{prefix}pk")
        )
    )
    return recreate


def _create_partitioned(
    conn: Any, names: DdlNames, sequence: str, recreate: list[tuple[str, str]]
) -> None:
    """The partitioned table under the queue's name, with the legacy partition attached;
    each of its indexes adopts its twin in the legacy partition (nothing is built there)."""
    table = sql.Identifier(names.schema, names.queue)
    table_ddl, upgrade_ddl = PostgresDialect(partitioned=True).partitioned_parent_ddl(
        names, sequence
    )
    conn.execute(table_ddl)
    conn.execute(
        sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM (MINVALUE) TO ({})").format(
            table, sql.Identifier(names.schema, legacy_name(names.queue)), sql.Literal(HOT_DAY)
        )
    )
    conn.execute(upgrade_ddl)  # indexes, notify trigger, routines
    for name, rest in recreate:
        conn.execute(
            sql.SQL("CREATE INDEX {} ON {} ").format(sql.Identifier(name), table) + sql.SQL(rest)
        )
    conn.execute(sql.SQL("ALTER SEQUENCE {} OWNED BY {}.id").format(sql.SQL(sequence), table))


def _move_backlog(conn: Any, names: DdlNames) -> int:
    """The unfinished rows to the hot partition, each status through its partial index;
    later attempts carry their first attempt's payload from now on (the legacy partition
    that holds it is purged)."""
    table = sql.Identifier(names.schema, names.queue)
    moved = 0
    for status in UNFINISHED:
        moved += conn.execute(
            sql.SQL(
                "UPDATE {} SET finished_day = {} WHERE finished_day < {} AND status = {}"
            ).format(table, sql.Literal(HOT_DAY), sql.Literal(HOT_DAY), sql.Literal(status)),
        ).rowcount
    conn.execute(
        sql.SQL(
            "UPDATE {} AS a SET payload = f.payload FROM {} AS f "
            "WHERE a.id_inicial = f.id AND a.payload IS NULL"
        ).format(
            sql.Identifier(names.schema, hot_partition(names.queue)),
            sql.Identifier(names.schema, legacy_name(names.queue)),
        )
    )
    return moved


def _carry_ownership(
    conn: Any, schema: str, queue: str, owner: str, grants: list[tuple[str, str]]
) -> None:
    """The new table and its partitions belong to the old table's owner (whose workers
    attach and drop days), with the old table's grants."""
    table = sql.Identifier(schema, queue)
    current = conn.execute("SELECT current_user").fetchone()[0]
    if owner != current:
        partitions = conn.execute(
            "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = %s::regclass",
            (f"{schema}.{queue}",),
        ).fetchall()
        conn.execute(sql.SQL("ALTER TABLE {} OWNER TO {}").format(table, sql.Identifier(owner)))
        for (partition,) in partitions:
            conn.execute(
                sql.SQL("ALTER TABLE {} OWNER TO {}").format(
                    sql.SQL(partition), sql.Identifier(owner)
                )
            )
    for grantee, privilege in grants:
        who = sql.SQL("PUBLIC") if grantee == "PUBLIC" else sql.Identifier(grantee)
        conn.execute(sql.SQL("GRANT {} ON {} TO {}").format(sql.SQL(privilege), table, who))
