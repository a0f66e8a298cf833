"""The queue's operations on MySQL >= 8.0 and MariaDB >= 10.6, for one queue table.

Same methods and meaning as ``PostgresQueueStore``; PyMySQL connections.

Client operations (insert, list) run in the caller's transaction on any
PyMySQL connection. Runtime operations expect worker connections that are
``autocommit=True`` and went through ``configure_executor_connection`` (the
executors': REPEATABLE READ) or ``configure_connection`` (the others': READ
COMMITTED) once, both in a UTC session: the store opens and ends
transactions with explicit statements, and on return from ``claim`` a
transaction is open for the first claimed task's handler, as on PostgreSQL.
An executor's claim, and its completion of a task with the next claim, is
one CALL of the queue's claim procedure (claim_procedure.sql) when the
database has the procedure of this version, else the same steps in SQL.

What differs from PostgreSQL, and why:
- Liveness and maintenance locks are named locks (``GET_LOCK(name, 0)``,
  ``IS_USED_LOCK``, ``RELEASE_LOCK``), held by the session like advisory
  locks. A task's lock is ``<prefix><task id>`` where the prefix names the
  queue (``nsjq:<schema>.<table>:``, or a hash of it when the name would pass
  MySQL's 64-character limit); see ``task_lock_name``.
- There is no oid: ``queue_oid`` is a stable 31-bit number derived from the
  qualified table name.
- There is no NOTIFY: ``notify`` sends nothing.
- A finished task commits before the next claim (two commits per task, one
  on PostgreSQL): the procedure's claim starts where a lock-free look-up
  found the first ready task, or for 20 ms after one at the executor's own
  last claim (claim_procedure.sql says why), and that look-up needs a
  statement outside any transaction. A failing claim is therefore undone on
  its own, never with the finished task's work.
- A deadlock (1213) or lock wait timeout (1205) while claiming or completing
  is retried here, never surfaced as a task failure.
- Times: the columns are TIMESTAMP(6) (UTC inside, the session's time zone
  outside). Rows come back with naive datetimes in the session's time zone
  (UTC on configured worker connections). A naive ``data_hora`` given to an
  insert is read in the session's time zone; an aware one is stored as that
  exact instant.

Driver errors leave this module as ``DatabaseError`` with the driver's error
as ``__cause__``.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
import random
import re
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

from nsj_queue_lib import model
from nsj_queue_lib.db.dialect import check_store_tables, claim_routine_name
from nsj_queue_lib.db.mysql.batch import (
    Result,
    Statement,
    StatementFailed,
    accepts_multi_statements,
    call_procedure,
    run_batch,
)
from nsj_queue_lib.db.mysql.dialect import TASK_JSON, claim_procedure_version
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.exceptions import DatabaseError, QueueTableMissingError
from nsj_queue_lib.identifiers import split_table_name
from nsj_queue_lib.log import get_logger

logger = get_logger("mysql")

_TASK_COLUMNS = ", ".join(f"t.{c}" for c in model.QUEUE_COLUMNS)
_TASK_COLUMNS_RESOLVED = ", ".join(
    "COALESCE(t.payload, first_attempt.payload) AS payload" if c == "payload" else f"t.{c}"
    for c in model.QUEUE_COLUMNS
)
_SUBSCRIBER_COLUMNS = ", ".join(f"s.{c}" for c in model.SUBSCRIBER_COLUMNS)
# the single-task claim's timestamp columns (see _task_from_json for the way back from JSON).
_TIMESTAMP_COLUMNS = ("data_hora_inicial", "data_hora", "proxima_tentativa", "data_hora_anterior")

# MySQL stores booleans as TINYINT(1); rows are given back with Python bools.
BOOLEAN_COLUMNS = (
    "reenfileirado",
    "estouro_tentativas",
    "pub_sub",
    "dead",
    "ativo",
    "liveness_locked",
)

# Server error codes retried inside the store while claiming or completing.
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
# The claim procedure was dropped, or may not be run by this user.
ER_SP_DOES_NOT_EXIST = 1305
ER_PROCACCESS_DENIED_ERROR = 1370
CLAIM_PROCEDURE_UNUSABLE = (ER_SP_DOES_NOT_EXIST, ER_PROCACCESS_DENIED_ERROR)
RETRYABLE_ERRORS = (ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK)
RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY = 0.005  # seconds; doubled per attempt, with jitter

# MySQL refuses lock names longer than 64 characters.
LOCK_NAME_MAX = 64
_LONGEST_SUFFIX = 24  # "svc:" + a signed 64-bit number, or a task id
# One multi-row INSERT stays well below the smallest usual max_allowed_packet
# (16 MiB on MariaDB, 64 MiB on MySQL 8); a larger batch takes a few statements.
INSERT_BATCH_BYTES = 4 * 1024 * 1024

_STEP_LINE = re.compile(r"^-- step: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_TIMESTAMP_MAX_EPOCH = 2**31 - 1  # 2038-01-19 03:14:07 UTC, the end of TIMESTAMP

T = TypeVar("T")


# -- driver errors --------------------------------------------------------------


def _is_driver_error(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] == "pymysql"


def error_code(exc: BaseException | None) -> int | None:
    """The server error number of a PyMySQL error (None for anything else)."""
    if isinstance(exc, StatementFailed):
        exc = exc.error
    if exc is None or not _is_driver_error(exc):
        return None
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_retryable(exc: BaseException | None) -> bool:
    """A deadlock or lock wait timeout: the transaction may simply be tried again."""
    return error_code(exc) in RETRYABLE_ERRORS


@contextmanager
def wrap_driver_errors(what: str) -> Iterator[None]:
    try:
        yield
    except StatementFailed as failed:
        if _is_driver_error(failed.error):
            raise DatabaseError(f"{what} failed: {failed.error}".strip()) from failed.error
        raise failed.error from None
    except Exception as exc:
        if _is_driver_error(exc):
            raise DatabaseError(f"{what} failed: {exc}".strip()) from exc
        raise


def retry_on_lock_errors(
    what: str, attempt: Callable[[], T], undo: Callable[[], None], attempts: int = RETRY_ATTEMPTS
) -> T:
    """Run ``attempt``; on a deadlock or lock wait timeout run ``undo`` and try again.

    ``undo`` must leave the connection as it was before the attempt (rolled
    back, locks of the attempt released). After ``attempts`` failures the
    last error leaves as DatabaseError.
    """
    for number in range(1, attempts + 1):
        try:
            return attempt()
        except Exception as exc:
            if not is_retryable(exc):
                raise
            with wrap_driver_errors(f"{what} (undoing a failed attempt)"):
                undo()
            if number == attempts:
                cause = exc.error if isinstance(exc, StatementFailed) else exc
                raise DatabaseError(f"{what} failed {attempts} times: {cause}") from cause
            logger.debug("%s: %s, trying again (attempt %d of %d)", what, exc, number + 1, attempts)
            time.sleep(RETRY_BASE_DELAY * (2 ** (number - 1)) * (0.5 + random.random()))
    raise AssertionError("unreachable")  # pragma: no cover


# -- SQL text ----------------------------------------------------------------


def split_steps(sql: str) -> dict[str, str]:
    """The ``-- step: <name>`` sections of one named query, in order.

    A query without step lines is a single step called ``sql``.
    """
    parts = _STEP_LINE.split(sql)
    if len(parts) == 1:
        return {"sql": sql.strip().rstrip(";").strip()}
    steps: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in steps:
            raise ValueError(f"step {name!r} appears twice in one query")
        steps[name] = body.strip().rstrip(";").strip()
    return steps


def _rows_as_dicts(cursor) -> list[dict[str, Any]]:
    if cursor.description is None:
        return []
    names = [col[0] for col in cursor.description]
    return [_normalize(dict(zip(names, row, strict=True))) for row in cursor.fetchall()]


def _normalize(item: dict[str, Any]) -> dict[str, Any]:
    for column in BOOLEAN_COLUMNS:
        value = item.get(column)
        if value is not None and not isinstance(value, bool):
            item[column] = bool(value)
    if isinstance(item.get("payload_hash"), (bytearray, memoryview)):
        item["payload_hash"] = bytes(item["payload_hash"])
    return item


def _task_from_json(document: str) -> dict[str, Any]:
    """A claimed row sent as the single-task claim's JSON object, with the types a plain SELECT gives."""
    task = json.loads(document)
    for column in _TIMESTAMP_COLUMNS:
        value = task[column]
        if value is not None:
            task[column] = datetime.datetime.fromisoformat(value)  # naive, the session's zone (UTC)
    if task["payload_hash"] is not None:
        task["payload_hash"] = bytes.fromhex(task["payload_hash"])
    return _normalize(task)


def exact_epoch(moment: datetime.datetime) -> decimal.Decimal:
    """Seconds since 1970 of an aware datetime, exact to the microsecond."""
    delta = moment - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return decimal.Decimal(micros).scaleb(-6)


def due_sql(data_hora: datetime.datetime | None) -> tuple[str, list[Any]]:
    """SQL (and its arguments) of a task's data_hora in a VALUES row.

    None is DEFAULT: the column's CURRENT_TIMESTAMP(6), exact whatever the
    session's time zone. A naive datetime is sent as is (read in the session's
    time zone). An aware datetime goes through FROM_UNIXTIME, so the stored
    instant is that exact instant.
    """
    if data_hora is None:
        return "DEFAULT", []
    if data_hora.tzinfo is None or data_hora.utcoffset() is None:
        return "%s", [data_hora]
    epoch = exact_epoch(data_hora)
    if not 0 < epoch <= _TIMESTAMP_MAX_EPOCH:
        raise ValueError(
            f"data_hora {data_hora.isoformat()} is outside what a MySQL TIMESTAMP holds "
            "(1970-01-01 00:00:01 to 2038-01-19 03:14:07 UTC)"
        )
    return "FROM_UNIXTIME(%s)", [epoch]


# -- names ----------------------------------------------------------------------


def _database_of(conn) -> str | None:
    db = getattr(conn, "db", None)
    if isinstance(db, (bytes, bytearray)):
        db = db.decode("utf-8", "replace")
    return db or None


def qualified_table(queue_table: str, conn=None) -> str:
    """``schema.table``: an unqualified name gets the connection's database."""
    schema, table = split_table_name(queue_table)
    schema = schema or (_database_of(conn) if conn is not None else None)
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


# -- server flavour ---------------------------------------------------------------

MARIADB, MYSQL, SINGLESTORE = "mariadb", "mysql", "singlestore"


class _ServerInfo:
    __slots__ = ("flavour", "increment")

    def __init__(self, flavour: str, increment: int):
        self.flavour = flavour
        self.increment = increment


_SERVERS: weakref.WeakKeyDictionary[Any, _ServerInfo] = weakref.WeakKeyDictionary()


def server_info(conn) -> _ServerInfo:
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
        info = _ServerInfo(MARIADB, 1)
    else:
        with conn.cursor() as cur:
            cur.execute("SHOW VARIABLES LIKE 'memsql_version'")
            flavour = SINGLESTORE if cur.fetchall() else MYSQL
            cur.execute("SELECT @@auto_increment_increment")
            increment = int(cur.fetchone()[0] or 1)
        info = _ServerInfo(flavour, increment)
    try:
        _SERVERS[conn] = info
    except TypeError:
        pass
    return info


# -- the store ------------------------------------------------------------------

_TASK_INSERT_FIELDS = (
    "origem",
    "destino",
    "processo",
    "chave_externa",
    "payload",
    "payload_hash",
    "tenant",
    "grupo_empresarial",
    "pub_sub",
)


class MysqlQueueStore:
    dialect = "mysql"

    def __init__(self, queue_table: str, subscriber_table: str | None = None):
        check_store_tables(queue_table, subscriber_table)
        self.queue_table = queue_table
        self.subscriber_table = subscriber_table
        queries = render_queries(
            self.dialect,
            {
                "queue_table": queue_table,
                # The subscriber queries are only run when a table was given.
                "subscriber_table": subscriber_table or "subscriber_table_not_configured",
                "task_columns": _TASK_COLUMNS,
                "task_columns_resolved": _TASK_COLUMNS_RESOLVED,
                "task_json": TASK_JSON,
                "subscriber_columns": _SUBSCRIBER_COLUMNS,
            },
        )
        self.sql = {name: split_steps(text) for name, text in queries.items()}
        # The claim procedure db_gen creates next to the table (claim_procedure.sql).
        self.claim_procedure = claim_routine_name(queue_table)
        self._claim_procedure_present: bool | None = None  # looked up on first use
        self._table_schema = split_table_name(queue_table)[0]
        self._lock_prefixes: dict[str | None, str] = {}

    def server(self, conn) -> _ServerInfo:
        """The server flavour behind ``conn`` (MariaDB, MySQL or SingleStore)."""
        return server_info(conn)

    # -- names --

    def lock_prefix(self, conn) -> str:
        # Asked several times per task: computed once per database (the one of
        # the connection counts only when the queue table names none).
        database = None if self._table_schema else _database_of(conn)
        prefix = self._lock_prefixes.get(database)
        if prefix is None:
            prefix = self._lock_prefixes[database] = lock_prefix(
                qualified_table(self.queue_table, conn)
            )
        return prefix

    def task_lock_name(self, conn, task_id: int) -> str:
        """The name of a task's liveness lock (held by the connection running it)."""
        return f"{self.lock_prefix(conn)}{int(task_id)}"

    def service_lock_name(self, conn, key: int) -> str:
        """The name of a maintenance service's lock (``key`` names queue and service)."""
        return f"{self.lock_prefix(conn)}svc:{int(key)}"

    def task_lock_keys(self, queue_oid: int, task_id: int) -> tuple[int, int]:
        """What ``unlock_task`` and ``complete_and_claim`` take for a task: (queue number, task id)."""
        return queue_oid, task_id

    # -- client operations (any PyMySQL connection, caller's transaction) --

    def insert_task(self, conn, row: dict[str, Any]) -> int:
        return self.insert_tasks(conn, [row], what="insert_task")[0]

    def insert_tasks(
        self, conn, rows: Sequence[dict[str, Any]], what: str = "insert_tasks"
    ) -> list[int]:
        if not rows:
            return []
        values = []
        for row in rows:
            due, due_args = due_sql(row.get("data_hora"))
            args = [row[name] for name in _TASK_INSERT_FIELDS]
            args.append(row.get("prioridade"))
            values.append(
                (
                    f"(%s, %s, %s, %s, %s, %s, %s, %s, %s, COALESCE(%s, 50), {due}, {due})",
                    args + due_args + due_args,
                )
            )
        return self._insert_rows(conn, what, self.sql[what], values)

    def _insert_rows(
        self, conn, what: str, sql: dict[str, str], values: list[tuple[str, list[Any]]]
    ) -> list[int]:
        """Multi-row INSERTs (as few as the size budget allows); the new ids in VALUES order."""
        with wrap_driver_errors(what):
            info = self.server(conn)
            if info.flavour == SINGLESTORE:
                # SingleStore's AUTO_INCREMENT values are unique but not
                # consecutive: one row per statement, each id read back.
                batches = [[value] for value in values]
            else:
                batches = list(_batches(values))
            ids: list[int] = []
            with conn.cursor() as cur:
                for batch in batches:
                    text = sql["head"] + "\n" + ",\n".join(v[0] for v in batch)
                    args = [a for v in batch for a in v[1]]
                    if info.flavour == MARIADB:
                        cur.execute(text + "\n" + sql["returning"], args)
                        ids.extend(int(r[0]) for r in cur.fetchall())
                    else:
                        cur.execute(text, args)
                        first = int(cur.lastrowid)
                        ids.extend(first + n * info.increment for n in range(len(batch)))
            return ids

    def list_equivalent(
        self, conn, chave_externa: str | None, payload_hash: bytes | None, statuses: Sequence[str]
    ) -> list[dict[str, Any]]:
        params = {
            "chave_externa": chave_externa,
            "payload_hash": payload_hash,
            "statuses": list(statuses),
        }
        return self._fetch(conn, "list_equivalent", params)

    def get_task(self, conn, task_id: int) -> dict[str, Any] | None:
        rows = self._fetch(conn, "get_task", {"id": task_id})
        return rows[0] if rows else None

    def list_subscribers(
        self, conn, processo: str, tenant: int | None, grupo_empresarial: str | None
    ) -> list[dict[str, Any]]:
        if self.subscriber_table is None:
            raise ValueError(f"no subscriber table configured for queue {self.queue_table}")
        params = {"processo": processo, "tenant": tenant, "grupo_empresarial": grupo_empresarial}
        return self._fetch(conn, "list_subscribers", params)

    def insert_deliveries(
        self, conn, publication: dict[str, Any], deliveries: Sequence[tuple[str, str, bytes | None]]
    ) -> list[int]:
        """Insert one task per (subscriber id, payload, payload hash) for a publication."""
        if not deliveries:
            return []
        common = [
            publication["origem"],
            publication["destino"],
            publication["processo"],
            publication["chave_externa"],
            publication["tenant"],
            publication["grupo_empresarial"],
            publication["prioridade"],
            publication["id"],
        ]
        values = [
            (
                "(%s, %s, %s, %s, %s, %s, COALESCE(%s, 50), %s, %s, %s, %s)",
                common + [sid, payload, digest],
            )
            for sid, payload, digest in deliveries
        ]
        return self._insert_rows(conn, "insert_deliveries", self.sql["insert_deliveries"], values)

    def _fetch(
        self, conn, name: str, params: dict[str, Any] | None = None, step: str = "sql"
    ) -> list[dict[str, Any]]:
        with wrap_driver_errors(name), conn.cursor() as cur:
            cur.execute(self.sql[name][step], params)
            return _rows_as_dicts(cur)

    def _run(self, conn, name: str, params: dict[str, Any] | None = None, step: str = "sql") -> int:
        """Execute one statement; its row count."""
        with wrap_driver_errors(name), conn.cursor() as cur:
            return cur.execute(self.sql[name][step], params)

    # -- runtime operations --

    def configure_connection(self, conn) -> None:
        """Once per worker connection (dispatcher, services), right after connecting: UTC, READ COMMITTED."""
        self._set_session(conn, "time_zone", "isolation")

    def configure_executor_connection(self, conn) -> None:
        """Once per executor connection, right after connecting: UTC, REPEATABLE READ."""
        self._set_session(conn, "time_zone", "executor_isolation")

    def _set_session(self, conn, *steps: str) -> None:
        with wrap_driver_errors("configure_connection"), conn.cursor() as cur:
            for step in steps:
                cur.execute(self.sql["claim_settings"][step])

    def queue_oid(self, conn) -> int:
        """A stable number for the queue (MySQL has no oid); fails when the table is missing."""
        schema, table = split_table_name(self.queue_table)
        with wrap_driver_errors("queue_oid"), conn.cursor() as cur:
            cur.execute(self.sql["queue_oid"]["sql"], {"schema": schema, "table": table})
            found = cur.fetchone()[0]
        if not found:
            raise QueueTableMissingError(f"table {self.queue_table} does not exist")
        return stable_queue_number(qualified_table(self.queue_table, conn))

    # Transaction control on autocommit connections (executor, admin).

    def begin(self, conn) -> None:
        with wrap_driver_errors("begin"):
            conn.begin()

    def commit(self, conn) -> None:
        with wrap_driver_errors("commit"):
            conn.commit()

    def rollback(self, conn) -> None:
        with wrap_driver_errors("rollback"):
            conn.rollback()

    def terminate_session(self, admin_conn, victim_conn) -> None:
        """End another connection's server session (its transaction rolls back, its locks go)."""
        with wrap_driver_errors("terminate_session"), admin_conn.cursor() as cur:
            cur.execute("KILL CONNECTION %s", (int(victim_conn.thread_id()),))

    def claim(self, conn, limit: int, queue_key: int | None = None) -> list[dict[str, Any]]:
        """Claim up to ``limit`` ready tasks, taking their liveness locks on ``conn``.

        ``conn`` (autocommit) is the connection that will run the tasks. On
        return a transaction is open for the first task's handler, or, when
        nothing was claimed, ``conn`` is idle. ``queue_key`` is accepted for
        the PostgreSQL signature and not used: lock names carry the queue.
        """
        return self._claim(conn, limit, in_transaction=False)

    def _claim(self, conn, limit: int, in_transaction: bool) -> list[dict[str, Any]]:
        """The claim, retried on deadlocks; ``in_transaction``: the first attempt's transaction is open."""
        if limit <= 0:
            if in_transaction:
                with wrap_driver_errors("claim"):
                    conn.rollback()
            return []
        taken: list[str] = []
        opened = [in_transaction]

        def attempt() -> list[dict[str, Any]]:
            taken.clear()
            if not opened[0]:
                conn.begin()
            opened[0] = False  # a retry opens its own transaction
            return self._claim_once(conn, limit, taken)

        def undo() -> None:
            conn.rollback()
            self._release_locks(conn, taken)

        with wrap_driver_errors("claim"):
            try:
                return retry_on_lock_errors("claim", attempt, undo)
            except BaseException:
                with suppress(Exception):  # the connection may be gone; its locks with it
                    undo()
                raise

    def _claim_once(self, conn, limit: int, taken: list[str]) -> list[dict[str, Any]]:
        """One claim in the open transaction: select, then mark, lock and COMMIT AND CHAIN."""
        if limit == 1 and accepts_multi_statements(conn):
            try:
                if self._has_claim_procedure(conn):
                    # The procedure commits too.
                    claimed = call_procedure(conn, self._procedure_call(conn, None, None))
                else:
                    claim = self._plain_single_claim(conn)
                    claimed = run_batch(conn, [*claim, ("COMMIT AND CHAIN", None)])[len(claim) - 1]
            except StatementFailed as failed:
                self._release_single_claim_lock(conn)
                if self._claim_procedure_failed(failed):
                    return self._claim_once(conn, limit, taken)  # the same claim in plain SQL
                raise
            return self._claimed_single(conn, claimed, taken)
        [selected] = run_batch(conn, [(self.sql["claim_tasks"]["select"], {"limit": limit})])
        return self._lock_selected(conn, selected, taken)

    def _plain_single_claim(self, conn) -> list[Statement]:
        """The single-task claim in SQL, for a queue without the claim procedure; the last result is the row."""
        steps = self.sql["claim_tasks"]
        return [
            (steps["single_forget"], None),
            (steps["single_select"], None),
            (steps["single_mark"], None),
            (steps["single_lock"], {"lock_prefix": self.lock_prefix(conn)}),
        ]

    def _procedure_call(self, conn, task_id: int | None, mensagem: str | None) -> Statement:
        """The claim procedure's CALL: settle ``task_id`` (when given), then claim one task."""
        return (
            f"CALL {self.claim_procedure}(%(id)s, %(mensagem)s, %(lock_prefix)s)",
            {"id": task_id, "mensagem": mensagem, "lock_prefix": self.lock_prefix(conn)},
        )

    def _has_claim_procedure(self, conn) -> bool:
        """Whether the database has this queue's claim procedure, in this version (looked up once)."""
        if self._claim_procedure_present is None:
            present = False
            if self.claim_procedure is not None:
                schema, name = split_table_name(self.claim_procedure)
                with wrap_driver_errors("claim_procedure_version"), conn.cursor() as cur:
                    cur.execute(
                        self.sql["claim_tasks"]["procedure_version"],
                        {"schema": schema, "name": name},
                    )
                    row = cur.fetchone()
                present = row is not None and row[0] == claim_procedure_version()
                if row is not None and not present:
                    logger.warning(
                        "%s was made by another version of nsj_queue_lib: claiming in plain SQL "
                        "until 'db_gen --upgrade' replaces it",
                        self.claim_procedure,
                    )
            self._claim_procedure_present = present
        return self._claim_procedure_present

    def _claim_procedure_failed(self, failed: StatementFailed) -> bool:
        """True when the claim procedure could not be called: it is not used again."""
        if error_code(failed) not in CLAIM_PROCEDURE_UNUSABLE or not self._claim_procedure_present:
            return False
        logger.warning(
            "%s cannot be called (%s): claiming in plain SQL from now on",
            self.claim_procedure,
            failed.error,
        )
        self._claim_procedure_present = False
        return True

    def _claimed_single(self, conn, locked_rows: Result, taken: list[str]) -> list[dict[str, Any]]:
        """The task the single-task claim returned (COMMIT AND CHAIN ran), or [] with ``conn`` idle.

        The row is one JSON document that also holds ``liveness_locked``, the
        GET_LOCK result; the name of a lock taken is added to ``taken``.
        Nothing claimed is no row (plain SQL) or a NULL document (procedure).
        """
        documents = [document for (document,) in locked_rows.rows if document is not None]
        if not documents:
            conn.rollback()  # the empty transaction opened for a task
            return []
        tasks = []
        for document in documents:
            task = _task_from_json(document)
            task["liveness_locked"] = task["liveness_locked"] is True
            if task["liveness_locked"]:
                taken.append(self.task_lock_name(conn, task["id"]))
            tasks.append(task)
        return tasks

    def _release_single_claim_lock(self, conn) -> None:
        """After a failed single-task claim batch: its liveness lock, if the lock step took it (best effort)."""
        with suppress(Exception):  # the connection may be gone, and its locks with it
            with conn.cursor() as cur:
                cur.execute(
                    self.sql["claim_tasks"]["single_release"],
                    {"lock_prefix": self.lock_prefix(conn)},
                )

    def _lock_selected(self, conn, selected: Result, taken: list[str]) -> list[dict[str, Any]]:
        """Mark the selected rows, take their liveness locks and commit, in one round trip.

        COMMIT AND CHAIN ends the claim and opens the first task's transaction.
        The names of the locks taken are added to ``taken`` (also when the
        commit fails, so the caller can release them).
        """
        tasks = [_normalize(dict(zip(selected.names, row, strict=True))) for row in selected.rows]
        if not tasks:
            conn.rollback()
            return []
        ids = [task["id"] for task in tasks]
        prefix = self.lock_prefix(conn)
        steps = self.sql["claim_tasks"]
        batch: list[tuple[str, Mapping[str, Any] | None]] = [
            (steps["mark"], {"ids": ids}),
            (steps["lock"], {"ids": ids, "lock_prefix": prefix}),
            ("COMMIT AND CHAIN", None),
        ]
        try:
            results = run_batch(conn, batch)
        except StatementFailed as failed:
            if len(failed.results) >= 2:
                _note_locks(failed.results[1], prefix, taken)
            raise
        locked = _note_locks(results[1], prefix, taken)
        first_payload = {row[0]: row[2] for row in results[1].rows}
        payloads = {
            task["id_inicial"]: first_payload.get(task["id"])
            for task in tasks
            if task["id_inicial"] is not None
        }
        return _claimed(tasks, payloads, locked)

    def _first_payloads(self, cur, tasks: list[dict[str, Any]]) -> dict[int, str | None]:
        need = sorted(
            {t["id_inicial"] for t in tasks if t["payload"] is None and t["id_inicial"] is not None}
        )
        if not need:
            return {}
        cur.execute(self.sql["claim_tasks"]["first_payloads"], {"ids": need})
        return dict(cur.fetchall())

    def _release_locks(self, conn, names: list[str]) -> None:
        if names:
            with conn.cursor() as cur:
                for name in names:
                    cur.execute(self.sql["unlock_task"]["sql"], {"name": name})
            names.clear()

    def _unlock_in(self, conn, lock_name: str) -> None:
        with conn.cursor() as cur:
            cur.execute(self.sql["unlock_task"]["sql"], {"name": lock_name})

    # Client/server mode: the liveness locks live in the socket server.

    def claim_uncommitted(self, conn, limit: int) -> list[dict[str, Any]]:
        """Claim without database locks and leave the claim's transaction open.

        For liveness locks held elsewhere (the socket server): the caller takes
        them, then commits with ``commit_and_begin``, or rolls back to return
        the tasks to the queue. Until then nobody sees the rows claimed.
        """
        if limit <= 0:
            return []

        def attempt() -> list[dict[str, Any]]:
            conn.begin()
            steps = self.sql["claim_tasks"]
            with conn.cursor() as cur:
                cur.execute(steps["select"], {"limit": limit})
                tasks = _rows_as_dicts(cur)
                if not tasks:
                    conn.rollback()
                    return []
                cur.execute(steps["mark"], {"ids": [task["id"] for task in tasks]})
                payloads = self._first_payloads(cur, tasks)
            return _claimed(tasks, payloads, {})

        with wrap_driver_errors("claim"):
            tasks = retry_on_lock_errors("claim", attempt, conn.rollback)
        for task in tasks:
            task.pop("liveness_locked", None)
        return tasks

    def commit_and_begin(self, conn) -> None:
        """Commit and open the next transaction in one statement."""
        with wrap_driver_errors("commit"), conn.cursor() as cur:
            cur.execute("COMMIT AND CHAIN")

    def complete_if_running(self, conn, task_id: int, mensagem: str) -> bool:
        """Write 'sucesso' in the open transaction; False when the row is no longer 'processando'.

        Lock wait timeouts are retried. After a deadlock (the handler's work is
        already rolled back) the task goes back to 'pendente' to run again and
        the answer is False: nothing of this attempt was committed.
        """
        with wrap_driver_errors("complete_task"), conn.cursor() as cur:
            for number in range(1, RETRY_ATTEMPTS + 1):
                try:
                    return (
                        cur.execute(
                            self.sql["complete_task"]["sql"], {"id": task_id, "mensagem": mensagem}
                        )
                        == 1
                    )
                except Exception as exc:
                    code = error_code(exc)
                    if code not in RETRYABLE_ERRORS:
                        raise
                    if code == ER_LOCK_DEADLOCK or number == RETRY_ATTEMPTS:
                        logger.warning(
                            "task=%s: %s while completing; the task goes back to the queue",
                            task_id,
                            exc,
                        )
                        self._give_back(conn, task_id, lambda: None)
                        return False
        return False  # pragma: no cover

    def complete_and_claim(
        self,
        conn,
        task_id: int,
        mensagem: str,
        keys: tuple[int, int] | None,
        limit: int,
        queue_key: int | None = None,
    ) -> list[dict[str, Any]]:
        """Settle a task as 'sucesso', release its lock, commit, and claim the next tasks.

        One task (an executor's step): one round trip, see
        ``_complete_and_claim_single``. Several: two round trips when the
        connection accepts multi-statements, the completion, its commit and
        the claim's select, then the claim's mark, locks and commit. ``limit``
        0 only completes. The completion always commits before the claim. A
        lock wait timeout on its update is retried in the same transaction. A
        deadlock there has already rolled the handler's work back: the task
        then goes back to 'pendente' to run again (nothing of it was
        committed), never recorded as a failure. A deadlock in the claim is
        retried after the completion was committed.
        """
        if limit == 1 and accepts_multi_statements(conn):
            return self._complete_and_claim_single(conn, task_id, mensagem)
        name = self.task_lock_name(conn, task_id)
        steps = self.sql["complete_and_unlock"]
        batch: list[tuple[str, Mapping[str, Any] | None]] = [
            (steps["complete"], {"id": task_id, "mensagem": mensagem}),
            (steps["unlock"], {"name": name}),
            ("COMMIT AND CHAIN" if limit > 0 else "COMMIT", None),
        ]
        if limit > 0:
            batch.append((self.sql["claim_tasks"]["select"], {"limit": limit}))
        with wrap_driver_errors("complete_task"):
            try:
                results = run_batch(conn, batch)
            except StatementFailed as failed:
                return self._after_failed_completion(conn, task_id, mensagem, name, limit, failed)
        if limit <= 0:
            return []
        taken: list[str] = []
        try:
            with wrap_driver_errors("claim"):
                return self._lock_selected(conn, results[-1], taken)
        except DatabaseError as exc:
            with suppress(Exception):  # the connection may be gone; its locks with it
                conn.rollback()
                self._release_locks(conn, taken)
            if not is_retryable(exc.__cause__):
                raise
            return self._claim(conn, limit, in_transaction=False)

    def _complete_and_claim_single(self, conn, task_id: int, mensagem: str) -> list[dict[str, Any]]:
        """Completion and unlock, committed; then the next task's claim and COMMIT AND CHAIN: one round trip.

        The completion commits before the claim starts, so a failing claim
        never takes the finished task's work with it: the claim is undone
        (its lock released) and, after a deadlock or lock wait timeout, tried
        again. A failure up to the completion's commit leaves nothing
        committed and is settled as before (``_after_failed_completion``).
        """
        if self._has_claim_procedure(conn):
            return self._complete_and_claim_by_procedure(conn, task_id, mensagem)
        name = self.task_lock_name(conn, task_id)
        steps = self.sql["complete_and_unlock"]
        claim = self._plain_single_claim(conn)
        batch: list[tuple[str, Mapping[str, Any] | None]] = [
            (steps["complete"], {"id": task_id, "mensagem": mensagem}),
            (steps["unlock"], {"name": name}),
            ("COMMIT", None),
            ("START TRANSACTION", None),
            *claim,
            ("COMMIT AND CHAIN", None),
        ]
        committed = 3  # statements up to and including the completion's commit
        with wrap_driver_errors("complete_task"):
            try:
                results = run_batch(conn, batch)
            except StatementFailed as failed:
                if failed.index < committed:
                    return self._after_failed_completion(conn, task_id, mensagem, name, 1, failed)
                return self._after_committed_completion(conn, task_id, failed)
        with wrap_driver_errors("claim"):
            return self._claimed_single(conn, results[committed + len(claim)], [])

    def _complete_and_claim_by_procedure(
        self, conn, task_id: int, mensagem: str
    ) -> list[dict[str, Any]]:
        """The same in one CALL of the claim procedure: the completion commits, then the claim (AND CHAIN)."""
        with wrap_driver_errors("complete_task"):
            try:
                claimed = call_procedure(conn, self._procedure_call(conn, task_id, mensagem))
            except StatementFailed as failed:
                if self._claim_procedure_failed(failed):
                    # The CALL did nothing: the same in plain SQL, in the same transaction.
                    return self._complete_and_claim_single(conn, task_id, mensagem)
                if not self._completion_committed(conn, task_id):
                    name = self.task_lock_name(conn, task_id)
                    return self._after_failed_completion(conn, task_id, mensagem, name, 1, failed)
                return self._after_committed_completion(conn, task_id, failed)
        with wrap_driver_errors("claim"):
            return self._claimed_single(conn, claimed, [])

    def _completion_committed(self, conn, task_id: int) -> bool:
        """After a failed CALL of the claim procedure: whether its completion of ``task_id`` had been committed.

        The procedure names the task in @nsjq_completed right after the
        commit; an older value names another task (ids are never reused).
        """
        with conn.cursor() as cur:
            cur.execute("SELECT @nsjq_completed")
            return cur.fetchone()[0] == task_id

    def _after_committed_completion(
        self, conn, task_id: int, failed: StatementFailed
    ) -> list[dict[str, Any]]:
        """The finished task was committed, then the claim after it failed: undo the claim, claim again.

        A deadlock or lock wait timeout is retried as a fresh claim. Any other
        error, or a fresh claim that fails too, leaves the task done and
        nothing claimed (logged), never raised: the caller would take it for
        a failed completion. The next claim on this connection meets the
        error again if it lasts.
        """
        with suppress(Exception):  # the connection may be gone; its locks with it
            conn.rollback()
        self._release_single_claim_lock(conn)
        error: BaseException = failed.error
        if is_retryable(failed):
            logger.debug(
                "task=%s: %s while claiming the next task; claiming again", task_id, failed.error
            )
            try:
                return self.claim(conn, 1)
            except DatabaseError as exc:
                error = exc
        logger.warning("task=%s: done, but claiming the next task failed: %s", task_id, error)
        return []

    def _after_failed_completion(
        self, conn, task_id: int, mensagem: str, name: str, limit: int, failed: StatementFailed
    ) -> list[dict[str, Any]]:
        """The completion batch failed at statement ``failed.index``: what the failure left, settled."""
        code = error_code(failed)

        def unlock() -> None:
            self._unlock_in(conn, name)

        if failed.index == 0 and code == ER_LOCK_WAIT_TIMEOUT:
            # Only the statement was undone: the transaction is still open.
            if not self._complete(conn, task_id, mensagem, unlock):
                self._give_back(conn, task_id, unlock)
                return self.claim(conn, limit) if limit > 0 else []
            if limit <= 0:
                conn.commit()
                return []
            with conn.cursor() as cur:
                cur.execute("COMMIT AND CHAIN")  # the claim's transaction
            return self._claim(conn, limit, in_transaction=True)
        if failed.index == 0 and code == ER_LOCK_DEADLOCK:
            logger.warning(
                "task=%s: %s while completing; the task goes back to the queue",
                task_id,
                failed.error,
            )
            self._give_back(conn, task_id, unlock)
            return self.claim(conn, limit) if limit > 0 else []
        if failed.index == 3 and code in RETRYABLE_ERRORS:
            # The task was committed; only the claim's select failed.
            conn.rollback()
            return self._claim(conn, limit, in_transaction=False)
        raise failed

    def _complete(self, conn, task_id: int, mensagem: str, unlock: Callable[[], None]) -> bool:
        """UPDATE 'sucesso' and release the lock in the handler's transaction; False when the work was lost."""
        params = {"id": task_id, "mensagem": mensagem}
        with conn.cursor() as cur:
            for number in range(1, RETRY_ATTEMPTS + 1):
                try:
                    cur.execute(self.sql["complete_task"]["sql"], params)
                    break
                except Exception as exc:
                    code = error_code(exc)
                    if code not in RETRYABLE_ERRORS:
                        raise
                    if code == ER_LOCK_DEADLOCK or number == RETRY_ATTEMPTS:
                        # A deadlock rolled the whole transaction back; so does
                        # giving up after lock wait timeouts.
                        logger.warning(
                            "task=%s: %s while completing; the task goes back to the queue",
                            task_id,
                            exc,
                        )
                        return False
        unlock()
        return True

    def _give_back(self, conn, task_id: int, unlock: Callable[[], None]) -> None:
        """After a lost completion: roll back, return the task to the queue, release its lock."""

        def attempt() -> None:
            conn.rollback()
            conn.begin()
            with conn.cursor() as cur:
                cur.execute(self.sql["release_task"]["sql"], {"id": task_id})
            unlock()
            conn.commit()

        retry_on_lock_errors("complete_task (giving the task back)", attempt, conn.rollback)

    def seconds_until_next_due(self, conn) -> float | None:
        with wrap_driver_errors("next_due"), conn.cursor() as cur:
            cur.execute(self.sql["next_due"]["sql"])
            value = cur.fetchone()[0]
        return None if value is None else float(value)

    def unlock_task(self, conn, keys: tuple[int, int]) -> None:
        """Release a task's liveness lock; ``keys`` as given by ``task_lock_keys``."""
        with wrap_driver_errors("unlock_task"), conn.cursor() as cur:
            cur.execute(
                self.sql["unlock_task"]["sql"], {"name": self.task_lock_name(conn, keys[1])}
            )

    def _fail(self, conn, name: str, params: dict[str, Any]) -> int | None:
        """Mark the attempt failed; when it was still 'processando', insert the row that follows it."""
        steps = self.sql[name]
        with wrap_driver_errors(name), conn.cursor() as cur:
            if cur.execute(steps["mark"], params) != 1:
                return None
            cur.execute(steps["insert"], params)
            return int(cur.lastrowid)

    def fail_and_retry(
        self, conn, task_id: int, status: str, mensagem: str, delay_seconds: float
    ) -> int | None:
        delay_us = max(0, round(delay_seconds * 1_000_000))
        params = {"id": task_id, "status": status, "mensagem": mensagem, "delay_us": delay_us}
        return self._fail(conn, "fail_and_retry", params)

    def fail_and_bury(
        self, conn, task_id: int, status: str, mensagem: str, payload: str | None
    ) -> int | None:
        params = {"id": task_id, "status": status, "mensagem": mensagem, "payload": payload}
        return self._fail(conn, "fail_and_bury", params)

    def fail_final(self, conn, task_id: int, status: str, mensagem: str) -> bool:
        params = {"id": task_id, "status": status, "mensagem": mensagem}
        return self._run(conn, "fail_final", params) == 1

    def release(self, conn, task_id: int) -> bool:
        return self._run(conn, "release_task", {"id": task_id}) == 1

    def try_service_lock(self, conn, key: int) -> bool:
        with wrap_driver_errors("try_service_lock"), conn.cursor() as cur:
            cur.execute(
                self.sql["try_service_lock"]["sql"], {"name": self.service_lock_name(conn, key)}
            )
            return cur.fetchone()[0] == 1

    def service_unlock(self, conn, key: int) -> None:
        self._run(conn, "service_unlock", {"name": self.service_lock_name(conn, key)})

    def find_orphans(
        self, conn, queue_oid: int | None, limit: int, check_db_locks: bool = True
    ) -> list[dict[str, Any]]:
        """'processando' rows nobody is settling, row-locked until the transaction ends.

        With ``check_db_locks`` False only the row locks are considered and the
        caller asks the socket server about the liveness locks. ``queue_oid``
        is not used: lock names carry the queue.
        """
        steps = self.sql["find_orphans"]
        params = {
            "lock_prefix": self.lock_prefix(conn),
            "limit": limit,
            "check_db_locks": check_db_locks,
        }
        with wrap_driver_errors("find_orphans"), conn.cursor() as cur:
            cur.execute(steps["candidates"], params)
            ids = [row[0] for row in cur.fetchall()]
            if not ids:
                return []
            cur.execute(steps["lock"], dict(params, ids=ids))
            ids = [row[0] for row in cur.fetchall()]
            if not ids:
                return []
            cur.execute(steps["rows"], {"ids": ids})
            return _rows_as_dicts(cur)

    def promote_due(self, conn, limit: int) -> int:
        steps = self.sql["promote_due"]
        with wrap_driver_errors("promote_due"), conn.cursor() as cur:
            cur.execute(steps["select"], {"limit": limit})
            ids = [row[0] for row in cur.fetchall()]
            return cur.execute(steps["mark"], {"ids": ids}) if ids else 0

    def has_stale_pending(self, conn, wait_seconds: float) -> bool:
        wait_us = max(0, round(wait_seconds * 1_000_000))
        with wrap_driver_errors("count_stale_pending"), conn.cursor() as cur:
            cur.execute(self.sql["count_stale_pending"]["sql"], {"wait_us": wait_us})
            return cur.fetchone()[0] > 0

    def notify(self, conn, channel: str, payload: str = "") -> None:
        """Nothing: MySQL has no NOTIFY (workers poll, or the socket server wakes them)."""

    def purge_round(self, conn, max_age_days: int, limit: int) -> int:
        steps = self.sql["purge"]
        with wrap_driver_errors("purge"), conn.cursor() as cur:
            cur.execute(steps["select"], {"max_age_days": max_age_days, "limit": limit})
            ids = [row[0] for row in cur.fetchall()]
            return cur.execute(steps["delete"], {"ids": ids}) if ids else 0


def _note_locks(lock_result: Result, prefix: str, taken: list[str]) -> dict[int, bool]:
    """Which claimed ids got their liveness lock (rows of the claim's lock step); adds them to ``taken``."""
    locked = {}
    for task_id, got, *_ in lock_result.rows:
        locked[task_id] = got == 1
        if got == 1:
            taken.append(f"{prefix}{task_id}")
    return locked


def _claimed(
    tasks: list[dict[str, Any]], payloads: dict[int, str | None], locked: dict[int, bool]
) -> list[dict[str, Any]]:
    """Claimed rows as the handler sees them: 'processando', payload resolved, lock flag."""
    for task in tasks:
        task["status"] = model.PROCESSANDO
        if task["payload"] is None and task["id_inicial"] is not None:
            task["payload"] = payloads.get(task["id_inicial"])
        task["liveness_locked"] = locked.get(task["id"], False)
    return tasks


def _batches(values: list[tuple[str, list[Any]]]) -> Iterator[list[tuple[str, list[Any]]]]:
    """VALUES rows grouped so that one statement stays within INSERT_BATCH_BYTES (roughly)."""
    batch: list[tuple[str, list[Any]]] = []
    size = 0
    for value in values:
        row_size = len(value[0]) + sum(_arg_size(a) for a in value[1])
        if batch and size + row_size > INSERT_BATCH_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(value)
        size += row_size
    if batch:
        yield batch


def _arg_size(value: Any) -> int:
    if value is None:
        return 4
    if isinstance(value, str):
        return 2 + 2 * len(value)  # quotes, and room for escaping and multi-byte characters
    if isinstance(value, (bytes, bytearray)):
        return 10 + 2 * len(value)
    return 32
