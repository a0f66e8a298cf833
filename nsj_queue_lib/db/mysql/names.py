"""Names a MySQL queue goes by: its qualified table, its lock names, its number, its server.

Liveness and maintenance locks are named locks (``GET_LOCK(name, 0)``,
``IS_USED_LOCK``, ``RELEASE_LOCK``), held by the session like PostgreSQL's
advisory locks. Every lock name of a queue starts with the queue's prefix.
MySQL has no table oid: the queue's number is derived from its qualified name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import weakref
from typing import Any

from nsj_queue_lib.identifiers import split_table_name

MARIADB, MYSQL, SINGLESTORE = "mariadb", "mysql", "singlestore"
# MySQL refuses lock names longer than 64 characters.
LOCK_NAME_MAX = 64
_LONGEST_SUFFIX = 24  # "svc:" + a signed 64-bit number, or a task id


def database_of(conn: Any) -> str | None:
    db = getattr(conn, "db", None)
    if isinstance(db, (bytes, bytearray)):
        db = db.decode("utf-8", "replace")
    return db or None


def qualified_table(queue_table: str, conn: Any = None) -> str:
    """``schema.table``: an unqualified name gets the connection's database."""
    schema, table = split_table_name(queue_table)
    schema = schema or (database_of(conn) if conn is not None else None)
    return f"{schema}.{table}" if schema else table


def lock_prefix(qualified: str) -> str:
    """The start of every lock name of a queue.

    ``nsjq:<schema.table>:`` when that leaves room for any suffix within 64
    characters and the name is lower case (lock names are case-insensitive);
    otherwise ``nsjq:<16 hex digits of its hash>:``.
    """
    readable = f"nsjq:{qualified}:"
    if len(readable) + _LONGEST_SUFFIX <= LOCK_NAME_MAX and qualified == qualified.lower():
        return readable
    return f"nsjq:{hashlib.blake2b(qualified.encode('utf-8'), digest_size=8).hexdigest()}:"


def stable_queue_number(qualified: str) -> int:
    """A 31-bit number that stands for the queue where PostgreSQL has its table's oid."""
    digest = hashlib.blake2b(f"nsj_queue_lib:{qualified}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF


def server_family(conn: Any) -> str:
    """``mariadb`` or ``mysql``: which variant of db_gen's DDL (``--server``) the server
    behind ``conn`` needs, from ``SELECT VERSION()`` (MariaDB's says so)."""
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        row = cur.fetchone()
    version = row[0] if row else ""
    if isinstance(version, bytes):
        version = version.decode("ascii", "replace")
    return MARIADB if "mariadb" in str(version).lower() else MYSQL


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    flavour: str  # MARIADB, MYSQL or SINGLESTORE
    increment: int  # auto_increment_increment: the step between a multi-row insert's ids


_SERVERS: weakref.WeakKeyDictionary[Any, ServerInfo] = weakref.WeakKeyDictionary()


def server_info(conn: Any) -> ServerInfo:
    """Which server ``conn`` talks to, detected once per connection.

    MariaDB says so in its handshake (no query). Otherwise one query tells
    SingleStore (it has ``memsql_version``) from MySQL, and one reads
    ``auto_increment_increment`` for the ids of multi-row inserts.
    """
    try:
        cached = _SERVERS.get(conn)
    except TypeError:  # not weak-referenceable
        cached = None
    if cached is not None:
        return cached
    version = getattr(conn, "server_version", "") or ""
    if isinstance(version, bytes):
        version = version.decode("ascii", "replace")
    if "mariadb" in version.lower():
        info = ServerInfo(MARIADB, 1)
    else:
        with conn.cursor() as cur:
            cur.execute("SHOW VARIABLES LIKE 'memsql_version'")
            flavour = SINGLESTORE if cur.fetchall() else MYSQL
            cur.execute("SELECT @@auto_increment_increment")
            increment = int(cur.fetchone()[0] or 1)
        info = ServerInfo(flavour, increment)
    try:
        _SERVERS[conn] = info
    except TypeError:
        pass
    return info


def table_exists(conn: Any, table: str) -> bool:
    """Whether ``[schema.]table`` exists (an unqualified name: in the connection's database)."""
    schema, name = split_table_name(table)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = COALESCE(%s, DATABASE()) AND TABLE_NAME = %s",
            (schema, name),
        )
        return bool(cur.fetchone()[0])
