"""Where the test databases come from, and how each test gets a clean queue.

PostgreSQL
    ``TEST_PG_DSN`` (libpq conninfo or URI) when set; it must be reachable,
    otherwise the run fails (you asked for that database). When unset, an
    embedded throwaway server is started with ``pgserver`` for the session.

MariaDB / MySQL
    ``TEST_MYSQL_DSN`` (``mysql://user:pass@host:port/db``). When it is unset
    or unreachable the tests that need it are skipped with the reason, except
    under ``CI=true`` where that fails the run instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
import urllib.parse
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nsj_queue_lib.db.dialect import DdlNames
from nsj_queue_lib.db.postgres.dialect import CLAIM_FUNCTION_ARGS as PG_CLAIM_FUNCTION_ARGS

CONNECT_TIMEOUT = 5  # seconds; an unreachable database is reported quickly
# Fixture DDL must never wait forever on a lock a broken test left behind.
ADMIN_OPTIONS = "-c lock_timeout=15000 -c statement_timeout=120000"


class DatabaseUnavailable(Exception):
    """A test database is not available; ``str(exc)`` says why."""


def ci_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """True under ``CI=true`` (also 1/yes): missing databases fail instead of skipping."""
    environ = os.environ if environ is None else environ
    return environ.get("CI", "").strip().lower() in ("1", "true", "yes", "on")


def redact(dsn: str) -> str:
    """The DSN with any password replaced by ``***`` (for messages)."""
    dsn = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", dsn)


# -- PostgreSQL --------------------------------------------------------------


def check_pg(dsn: str) -> None:
    """Raise DatabaseUnavailable unless ``dsn`` accepts a connection and a query."""
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT, autocommit=True) as conn:
            conn.execute("SELECT 1").fetchone()
    except Exception as exc:  # any driver error means "not usable"
        raise DatabaseUnavailable(f"cannot connect to TEST_PG_DSN={redact(dsn)!r}: {exc}") from exc


# Serializes pgserver starts of every test process of the machine (see start_pgserver).
PGSERVER_LOCK = Path(tempfile.gettempdir()) / "nsj_queue_lib-tests" / "pgserver.lock"


def start_pgserver(directory: str | Path, cleanup_mode: str | None) -> Any:
    """``pgserver.get_server(directory)``, one process of the machine at a time.

    As root, pgserver runs PostgreSQL as a system user ``pgserver`` that it creates on
    first use, outside its own lock. On this machine's first run, when that user was
    created, initdb failed on 2 of 4 xdist workers starting together (329 tests skipped);
    starting one at a time leaves no such window. A ``CalledProcessError`` of initdb or
    pg_ctl carries no output; pgserver logs it, so the error raised here ends with the
    last lines of that log.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
        import pgserver

    errors: list[str] = []

    class _Errors(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            errors.append(record.getMessage())

    handler = _Errors(logging.ERROR)
    logger = logging.getLogger("pgserver")
    logger.addHandler(handler)
    PGSERVER_LOCK.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(PGSERVER_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return pgserver.get_server(Path(directory), cleanup_mode=cleanup_mode)
    except Exception as exc:
        if not errors:
            raise
        tail = " | ".join(line for line in errors[-1].splitlines()[-6:] if line.strip())
        raise RuntimeError(f"{exc} -- pgserver's log: {tail}") from exc
    finally:
        logger.removeHandler(handler)


class EmbeddedPostgres:
    """A throwaway PostgreSQL started with pgserver in a fresh temporary directory."""

    def __init__(self) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
                import pgserver  # noqa: F401 - only: is it installed?
        except ImportError as exc:
            raise DatabaseUnavailable(
                "TEST_PG_DSN is unset and pgserver is not installed "
                "(pip install -e '.[test]'), so no PostgreSQL is available"
            ) from exc
        # Short path: the unix socket lives in this directory (108-byte limit).
        self.directory = tempfile.mkdtemp(prefix="nsjq-pg-")
        try:
            self._server = start_pgserver(self.directory, cleanup_mode="stop")
            self.dsn = self._server.get_uri()
            check_pg(self.dsn)
        except BaseException as exc:
            shutil.rmtree(self.directory, ignore_errors=True)
            if isinstance(exc, DatabaseUnavailable):
                raise
            if isinstance(exc, Exception):
                raise DatabaseUnavailable(
                    f"the embedded PostgreSQL (pgserver) did not start: {exc}"
                ) from exc
            raise

    def stop(self) -> None:
        try:
            self._server.cleanup()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def connect_pg(dsn: str, driver: str = "psycopg", autocommit: bool = False):
    """A new connection made with ``psycopg`` (3) or ``psycopg2``."""
    if driver == "psycopg":
        import psycopg

        return psycopg.connect(dsn, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT)
    if driver == "psycopg2":
        import psycopg2

        conn = psycopg2.connect(dsn, connect_timeout=CONNECT_TIMEOUT)
        conn.autocommit = autocommit
        return conn
    raise ValueError(f"unknown driver {driver!r}")


def transaction_status(conn) -> str:
    """'IDLE', 'INTRANS', 'INERROR', 'ACTIVE' or 'UNKNOWN' for a psycopg 3 or psycopg2 connection."""
    root = type(conn).__module__.split(".")[0]
    if root == "psycopg":
        return conn.info.transaction_status.name
    if root == "psycopg2":
        from psycopg2 import extensions as ext

        return {
            ext.TRANSACTION_STATUS_IDLE: "IDLE",
            ext.TRANSACTION_STATUS_ACTIVE: "ACTIVE",
            ext.TRANSACTION_STATUS_INTRANS: "INTRANS",
            ext.TRANSACTION_STATUS_INERROR: "INERROR",
        }.get(conn.get_transaction_status(), "UNKNOWN")
    raise TypeError(f"not a PostgreSQL connection: {type(conn)!r}")


@dataclasses.dataclass(frozen=True)
class QueueNames:
    """A queue's name and the names ``db_gen`` derives from it (PgQueue, MysqlQueue)."""

    name: str

    @property
    def namespace(self) -> str:
        """Where its tables are: the schema (PostgreSQL) or the database (MySQL)."""
        raise NotImplementedError

    @property
    def table(self) -> str:
        return f"{self.namespace}.{self.name}"

    @property
    def subscriber_table(self) -> str:
        return f"{self.table}_subscriber"

    @property
    def claim_index(self) -> str:
        return f"idx_{self.name}_claim"


@dataclasses.dataclass(frozen=True)
class PgQueue(QueueNames):
    """A queue created for one test by our DDL generator."""

    dsn: str
    schema: str = "public"

    @property
    def namespace(self) -> str:
        return self.schema

    @property
    def function(self) -> str:
        return f"{self.schema}.notify_{self.name}_insert"


# The PostgreSQL claim function's argument types (a MySQL procedure is named alone).
CLAIM_FUNCTION_ARGS = PG_CLAIM_FUNCTION_ARGS


def drop_claim_routine_sql(postgres: bool, routine: str) -> str:
    """Drops a queue's claim routine: the PostgreSQL function or the MySQL procedure."""
    if postgres:
        return f"DROP FUNCTION {routine}{CLAIM_FUNCTION_ARGS}"
    return f"DROP PROCEDURE {routine}"


def comment_claim_routine_sql(postgres: bool, routine: str, comment: str) -> str:
    """Sets the COMMENT of a queue's claim routine (where db_gen writes its version)."""
    if postgres:
        return f"COMMENT ON FUNCTION {routine}{CLAIM_FUNCTION_ARGS} IS '{comment}'"
    return f"ALTER PROCEDURE {routine} COMMENT '{comment}'"


def busy_row_sql(n: str) -> str:
    """SQL for processo, status and prioridade of row number ``n`` of a busy queue: mostly
    history, a tenth ready, a tenth scheduled, a few running."""
    return (
        f"'p', CASE WHEN {n} % 10 = 0 THEN 'pendente' WHEN {n} % 10 = 1 THEN 'agendada' "
        f"WHEN {n} % 97 = 0 THEN 'processando' ELSE 'sucesso' END, 50 + {n} % 3"
    )


def insert_subscriber(
    execute,
    table: str,
    subscriber_id: str,
    processo: str,
    url: str | None = None,
    http_method: str | None = None,
    headers: dict | None = None,
    ativo: bool = True,
    tenant: int | None = None,
    grupo_empresarial: str | None = None,
) -> None:
    """One row of the subscriber table ``table``, through ``execute(sql, args)`` (any driver)."""
    execute(
        f"INSERT INTO {table} "
        "(id, tenant, grupo_empresarial, processo, url, http_method, headers, ativo) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (
            subscriber_id,
            tenant,
            grupo_empresarial,
            processo,
            url,
            http_method,
            None if headers is None else json.dumps(headers),
            ativo,
        ),
    )


def unique_queue_name(prefix: str = "q_") -> str:
    return f"{prefix}{secrets.token_hex(6)}"


# Days ahead of today that the partitioned queue fixtures make partitions for: the fewest the
# stores' bind does not warn about (retention.SHORT_AHEAD in both dialects). db_gen's 14
# made a MariaDB queue cost 0.57 s instead of 0.30 s, in some 130 store tests per dialect
# pair; a test that counts the days ahead asks for them with @pytest.mark.full_days_ahead.
FEW_DAYS_AHEAD = 2


def fixture_days_ahead(request) -> int | None:
    """The days ahead a fixture's partitioned queue gets: None (db_gen's own) for a test
    marked ``full_days_ahead``, else ``FEW_DAYS_AHEAD``."""
    return None if request.node.get_closest_marker("full_days_ahead") else FEW_DAYS_AHEAD


@contextlib.contextmanager
def days_ahead(days: int | None):
    """db_gen renders partitions for ``days`` days ahead in this block (None: its own
    number).

    db_gen has no option for it, on purpose (the purge service keeps DAYS_AHEAD days ahead
    whatever the script made); the two layout modules' values are replaced meanwhile.
    """
    if days is None:
        yield
        return
    from nsj_queue_lib.db.mysql import layout as mysql_layout
    from nsj_queue_lib.db.postgres import dialect as pg_dialect

    real = pg_dialect.layout_values

    def pg_values(partitioned, values, days_ahead=days):
        return real(partitioned, values, days_ahead=days_ahead)

    saved = mysql_layout.DAYS_AHEAD
    pg_dialect.layout_values = pg_values
    mysql_layout.DAYS_AHEAD = days
    try:
        yield
    finally:
        pg_dialect.layout_values = real
        mysql_layout.DAYS_AHEAD = saved


def create_queue(
    admin_conn,
    dsn: str,
    name: str | None = None,
    schema: str = "public",
    layout: str = "plain",
    days: int | None = None,
) -> PgQueue:
    """Create a queue with ``nsj_queue_lib.db_gen.render`` on an autocommit connection;
    ``days``: the partitioned layout's days ahead (None: db_gen's)."""
    from nsj_queue_lib.db_gen import render

    queue = PgQueue(name or unique_queue_name(), dsn, schema)
    with days_ahead(days):
        script = render(schema, queue.name, layout=layout)
    admin_conn.execute(script)
    return queue


def drop_queue(admin_conn, queue: PgQueue) -> None:
    drop_queue_objects(admin_conn, queue.schema, queue.name)


def drop_queue_objects(admin_conn, schema: str, name: str) -> None:
    """Drop a queue's tables and trigger function, whichever generator made them."""
    admin_conn.execute(
        f"DROP TABLE IF EXISTS {schema}.{name} CASCADE;"
        f"DROP TABLE IF EXISTS {schema}.{name}_subscriber CASCADE;"
        f"DROP TABLE IF EXISTS {schema}.{name}_periodic;"
        f"DROP TABLE IF EXISTS {schema}.{name}_workers, {schema}.{name}_groups;"
        f"DROP TABLE IF EXISTS {schema}.{name}_tally, {schema}.{name}_tally_open, "
        f"{schema}.{name}_tally_state;"
        f"DROP TABLE IF EXISTS {schema}.{name}_parents;"
        f"DROP TABLE IF EXISTS {schema}.{name}_waiting;"
        f"DROP TABLE IF EXISTS {schema}.{name}_workflows, {schema}.{name}_workflow_tasks;"
        f"DROP TABLE IF EXISTS {schema}.{name}_steps, {schema}.{name}_events;"
        f"DROP TABLE IF EXISTS {schema}.{name}_processes, {schema}.{name}_process_tasks, "
        f"{schema}.{name}_process_events;"
        f"DROP FUNCTION IF EXISTS {schema}.release_{name}(bigint[]);"
        f"DROP TABLE IF EXISTS {schema}.{name}_limits CASCADE;"
        f"DROP FUNCTION IF EXISTS {schema}.notify_{name}_insert() CASCADE;"
        f"DROP FUNCTION IF EXISTS {schema}.notify_{name}_end() CASCADE;"
        f"DROP FUNCTION IF EXISTS {schema}.finished_day_{name}() CASCADE;"
        # The group settle function names no table type: CASCADE does not reach it.
        f"DROP FUNCTION IF EXISTS {schema}.{DdlNames.settle_routine_name(name)}"
        "(bigint[], text[], integer)"
    )


def count_rows(conn, table: str, where: str = "true") -> int:
    return conn.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()[0]


def table_exists(conn, table: str) -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]


def collect_until_sentinel(
    listen_conn, admin_conn, channel: str, timeout: float = 10.0
) -> list[str]:
    """Payloads of the notifications on ``channel`` delivered before a sentinel.

    Sends ``NOTIFY channel, '<sentinel>'`` from ``admin_conn`` (autocommit)
    and reads ``listen_conn`` until the sentinel arrives. Notifications are
    delivered in commit order, so everything committed before this call that
    notified is in the returned list: no sleeping, no guessing.
    """
    sentinel = f"sentinel-{secrets.token_hex(4)}"
    admin_conn.execute("SELECT pg_notify(%s, %s)", (channel, sentinel))
    seen: list[str] = []
    for notify in listen_conn.notifies(timeout=timeout):
        if notify.channel != channel:
            continue
        if notify.payload == sentinel:
            return seen
        seen.append(notify.payload)
    raise AssertionError(f"sentinel notification on {channel!r} not received within {timeout}s")


# -- catalog snapshots (compare what two DDL paths produced) -------------------


_END_KEY = re.compile(r"(pg_try_advisory_lock|pg_advisory_unlock)\('?-?\d+'?(?:::integer)?,")


def queue_catalog(conn, schema: str, name: str) -> dict[str, Any]:
    """Columns, indexes (also the subscriber table's), triggers, trigger function and
    storage parameters of a queue, with its name replaced by ``{q}``.

    Two queues built by different paths compare equal when their structure is
    the same.
    """

    def anon(text: str | None) -> str | None:
        return None if text is None else text.replace(name, "{q}")

    table = f"{schema}.{name}"
    columns = {
        row[0]: (row[1], anon(row[2]), row[3])
        for row in conn.execute(
            """
            SELECT a.attname, format_type(a.atttypid, a.atttypmod),
                   pg_get_expr(d.adbin, d.adrelid), a.attnotnull
            FROM pg_attribute a
            LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
            """,
            (table,),
        )
    }
    indexes = {
        anon(row[0]): anon(row[1])
        for row in conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
            (schema, name),
        )
    }
    subscriber_indexes = {
        anon(row[0]): anon(row[1])
        for row in conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
            (schema, f"{name}_subscriber"),
        )
    }

    def anon_trigger(text: str | None) -> str | None:
        # The end trigger's lock key is a hash of the queue's name (db/dialect.py), printed
        # as 272589811 or, when negative, '-30497401'::integer.
        return None if text is None else _END_KEY.sub(r"\1({end_key},", anon(text) or "")

    triggers = {
        anon(row[0]): anon_trigger(row[1])
        for row in conn.execute(
            "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger "
            "WHERE tgrelid = %s::regclass AND NOT tgisinternal",
            (table,),
        )
    }
    function = conn.execute(
        "SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = %s AND p.proname = %s",
        (schema, f"notify_{name}_insert"),
    ).fetchone()
    # The table's storage parameters (its autovacuum settings), as {name: value}.
    options = conn.execute(
        "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = %s::regclass", (table,)
    ).fetchone()[0]
    return {
        "columns": columns,
        "indexes": indexes,
        "subscriber_indexes": subscriber_indexes,
        "triggers": triggers,
        "function": anon(function[0]) if function else None,
        "options": dict(option.split("=", 1) for option in options),
    }


# -- MariaDB / MySQL ---------------------------------------------------------


def mysql_connect_kwargs(dsn: str) -> dict[str, Any]:
    """PyMySQL ``connect()`` keyword arguments for ``mysql://user:pass@host:port/db``.

    User, password and database are URL-decoded. Query parameters
    ``charset`` and ``unix_socket`` are passed through.
    """
    parts = urllib.parse.urlsplit(dsn.strip())
    if parts.scheme not in ("mysql", "mariadb", "mysql+pymysql"):
        raise ValueError(f"expected mysql://user:pass@host:port/db, got scheme {parts.scheme!r}")
    try:
        port = parts.port or 3306
    except ValueError as exc:
        raise ValueError(f"bad port in MySQL DSN: {exc}") from None
    database = urllib.parse.unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise ValueError("the MySQL DSN must name one database: mysql://user:pass@host:port/db")
    kwargs: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": port,
        "user": urllib.parse.unquote(parts.username) if parts.username else "root",
        "password": urllib.parse.unquote(parts.password) if parts.password else "",
        "database": database,
        "charset": "utf8mb4",
    }
    query = dict(urllib.parse.parse_qsl(parts.query))
    unknown = set(query) - {"charset", "unix_socket"}
    if unknown:
        raise ValueError(f"unsupported MySQL DSN parameters: {', '.join(sorted(unknown))}")
    kwargs.update(query)
    return kwargs


def resolve_mysql(environ: Mapping[str, str] | None = None) -> str:
    """The reachable ``TEST_MYSQL_DSN``, or raise DatabaseUnavailable saying why not.

    A malformed DSN raises ValueError: that is a mistake, never a skip.
    """
    environ = os.environ if environ is None else environ
    dsn = environ.get("TEST_MYSQL_DSN", "").strip()
    if not dsn:
        raise DatabaseUnavailable(
            "TEST_MYSQL_DSN is not set (mysql://user:pass@host:port/db); MariaDB/MySQL tests skipped"
        )
    kwargs = mysql_connect_kwargs(dsn)
    import pymysql

    try:
        conn = pymysql.connect(**kwargs, connect_timeout=CONNECT_TIMEOUT)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
        finally:
            conn.close()
    except Exception as exc:
        raise DatabaseUnavailable(
            f"cannot connect to TEST_MYSQL_DSN={redact(dsn)!r}: {exc}"
        ) from exc
    return dsn
