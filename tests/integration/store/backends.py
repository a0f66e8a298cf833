"""The store conformance suite's backends, and dialect-neutral ways to look at their tables.

A ``Backend`` is one fresh queue made by ``db_gen`` (the ``pg_queue`` or
``mysql_queue`` fixture) and the ways the library reaches it:

- ``postgres``: PostgresQueueStore; client connections are psycopg 3;
- ``psycopg2``: the same, with psycopg2 client connections (client tests only);
- ``mysql``: MysqlQueueStore on MariaDB, PyMySQL connections;
- ``mysql-partitioned``: the same on a table of the partitioned layout;
- ``singlestore``: SingleStoreQueueStore on MariaDB (SingleStore cannot run
  here; its store only uses SQL MariaDB shares), on the MySQL DDL's table.

Worker connections come from the dialect's driver, as the runtime makes
them (``Driver.connect(autocommit=True, executor=True)``); the store is the
driver's (``Driver.store()``), bound on the admin connection. Rows read
back are normalised so that one assertion holds on every dialect: booleans
are ``bool``, ``payload_hash`` is ``bytes`` and times are aware (UTC).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nsj_queue_lib import QueueClient, model
from nsj_queue_lib.db.dialect import claim_routine_name
from nsj_queue_lib.db.driver import Driver, make_driver
from nsj_queue_lib.db.postgres.store import queue_lock_key
from nsj_queue_lib.settings import Settings
from tests.helpers import databases
from tests.helpers import mysql_queue as mysql_helpers
from tests.helpers.processes import dsn_params

UTC = datetime.timezone.utc
TASK = dict(
    origem="erp",
    destino="fiscal",
    processo="emitir_nota",
    chave_externa="pedido-1",
    payload="texto",
)

POSTGRES = pytest.param("postgres", id="postgres")
PSYCOPG2 = pytest.param("psycopg2", id="psycopg2")
MYSQL = pytest.param("mysql", id="mysql", marks=pytest.mark.mysql)
SINGLESTORE = pytest.param("singlestore", id="singlestore", marks=pytest.mark.mysql)
# PostgreSQL's partitioned layout (db/postgres/layout.py): every test of the plain one too.
PARTITIONED = pytest.param("partitioned", id="partitioned")
# MariaDB's partitioned layout (db/mysql/layout.py), the same way.
MYSQL_PARTITIONED = pytest.param(
    "mysql-partitioned", id="mysql-partitioned", marks=pytest.mark.mysql
)
# Stores with session locks (claim, complete_and_claim, liveness and service locks).
LOCKING = [POSTGRES, PARTITIONED, MYSQL, MYSQL_PARTITIONED]
# Every store: what the socket-server path and the maintenance services use.
EVERY_STORE = [POSTGRES, PARTITIONED, MYSQL, MYSQL_PARTITIONED, SINGLESTORE]
# Every way a caller's connection reaches a store (QueueClient).
CLIENT_PATHS = [POSTGRES, PSYCOPG2, MYSQL, SINGLESTORE]

_DB_DRIVERS = dict(
    postgres="POSTGRES",
    psycopg2="POSTGRES",
    partitioned="POSTGRES",
    mysql="MYSQL",
    singlestore="SINGLE_STORE",
)
_DB_DRIVERS["mysql-partitioned"] = "MYSQL"
POSTGRES_KINDS = ("postgres", "psycopg2", "partitioned")
_BOOLEAN_COLUMNS = ("reenfileirado", "estouro_tentativas", "pub_sub", "dead", "ativo")


def on(*kinds: Any) -> pytest.MarkDecorator:
    """Run a test (or a module, as ``pytestmark``) on these backends instead of ``LOCKING``;
    a test's own choice wins over its module's."""
    return pytest.mark.backends(*kinds)


def ago(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(UTC) - datetime.timedelta(seconds=seconds)


def drain_concurrently(backend: Backend, workers: int, drain: Callable[[Any], list[int]]) -> None:
    """Start ``workers`` executors at once, each draining the queue with ``drain(conn)`` (the
    ids it claimed); every task must be claimed exactly once, by more than one of them."""
    conns = [backend.worker() for _ in range(workers)]
    claimed: list[list[int]] = [[] for _ in conns]
    errors: list[BaseException] = []
    barrier = threading.Barrier(workers)

    def work(index: int) -> None:
        try:
            barrier.wait()
            claimed[index] = drain(conns[index])
        except BaseException as exc:  # asserted below: none may be collected
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    everything = [task_id for ids in claimed for task_id in ids]
    total = backend.count()
    assert len(everything) == total and len(set(everything)) == total
    assert sum(1 for ids in claimed if ids) > 1  # several workers really took part
    assert backend.count("status = 'sucesso'") == total


# -- any DB-API connection (psycopg 3, psycopg2, PyMySQL): %s parameters on all three --


def execute(conn: Any, sql: str, args: Any = None) -> int:
    """Run one statement; its row count."""
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return int(cur.rowcount)


def fetch(conn: Any, sql: str, args: Any = None) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        names = [column[0] for column in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def value(conn: Any, sql: str, args: Any = None) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()[0]


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    """A row as every dialect can compare it (see the module's docstring)."""
    for column, item in row.items():
        if column in _BOOLEAN_COLUMNS and item is not None:
            row[column] = bool(item)
        elif isinstance(item, (memoryview, bytearray)):
            row[column] = bytes(item)
        elif isinstance(item, datetime.datetime) and item.tzinfo is None:
            row[column] = item.replace(tzinfo=UTC)  # MySQL: the admin session is UTC
    return row


def _settings(kind: str, queue: Any, db: dict[str, Any]) -> Settings:
    return Settings(
        db_driver=_DB_DRIVERS[kind],
        db_host=db["host"],
        db_port=int(db["port"]),
        db_name=db["name"],
        db_user=db["user"],
        db_pass=db["password"] or "",
        queue_name=queue.name,
        queue_table=queue.table,
        queue_subscriber_table=queue.subscriber_table,
    )


@dataclasses.dataclass
class Backend:
    kind: str
    queue: Any  # tests.helpers.databases.PgQueue or tests.helpers.mysql_queue.MysqlQueue
    admin: Any  # autocommit: fixtures, and what is committed as another session sees it
    connect_args: Any  # the PostgreSQL DSN, or PyMySQL's connect() keyword arguments
    opened: list[Any] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.dialect = "postgres" if self.kind in POSTGRES_KINDS else "mysql"
        if self.dialect == "postgres":
            info = dsn_params(self.connect_args)
            db = dict(info, name=info["dbname"])
        else:
            db = dict(self.connect_args, name=self.connect_args["database"])
            execute(self.admin, "SET time_zone = '+00:00'")
        self.driver: Driver = make_driver(_settings(self.kind, self.queue, db))
        self.store: Any = self.driver.store()
        self.store.bind(self.admin)
        self._enqueuer: Any = None

    @property
    def hot(self) -> str:
        """What pins a statement by id to the unfinished rows' partition on MariaDB's
        partitioned layout, as this library's statements are pinned: unpinned, an update by
        id is a range of the primary key (id, finished_day), whose gap locks hold up the
        inserts that follow (docs/internals/storage.md)."""
        return "finished_day = 1 AND " if self.kind == "mysql-partitioned" else ""

    def where_id(self, task_id: int) -> str:
        """``id = <task_id>``, and on MariaDB's partitioned layout the row's partition key
        too: a unique look-up, which locks the row alone (``hot`` says why)."""
        if self.kind != "mysql-partitioned":
            return f"id = {int(task_id)}"
        sql = f"SELECT finished_day FROM {self.table} WHERE id = %s"
        return f"id = {int(task_id)} AND finished_day = {int(self.value(sql, (task_id,)))}"

    @property
    def table(self) -> str:
        return str(self.queue.table)

    @property
    def subscriber_table(self) -> str:
        return str(self.queue.subscriber_table)

    def close(self) -> None:
        for conn in self.opened:
            with contextlib.suppress(Exception):  # killed by a test, say
                conn.close()

    def _keep(self, conn: Any) -> Any:
        self.opened.append(conn)
        return conn

    def upgrade(self) -> None:
        """``db_gen --upgrade``'s output run on the queue (plain layouts only: the
        partitioned ones are checked by test_store_migration.py)."""
        from nsj_queue_lib.db_gen import render

        schema, name = self.table.split(".")
        if self.dialect == "postgres":
            self.admin.execute(render(schema, name, upgrade=True))
        else:
            mysql_helpers.execute_script(self.admin, render(schema, name, "mysql", upgrade=True))

    # -- connections and stores --

    def new_store(self, table: str | None = None) -> Any:
        """An unbound store of this backend's kind, on ``table`` (default: the queue's)."""
        return self.driver.new_store(table or self.table, self.subscriber_table)

    def client_conn(self) -> Any:
        """A caller's connection, not autocommit: the client runs in its transaction."""
        if self.kind in ("postgres", "partitioned"):
            conn = databases.connect_pg(self.connect_args, "psycopg")
        elif self.kind == "psycopg2":
            conn = databases.connect_pg(self.connect_args, "psycopg2")
        else:
            conn = mysql_helpers.connect(self.connect_args)
        return self._keep(conn)

    def client(self, conn: Any, table: str | None = None, **options: Any) -> QueueClient:
        client = QueueClient(conn, table or self.table, self.subscriber_table, **options)
        if self.kind == "singlestore":  # a PyMySQL connection alone selects the MySQL store
            client._store = self.driver.new_store(table or self.table, self.subscriber_table)
        return client

    def worker(self, executor: bool = True) -> Any:
        """An autocommit worker connection, its session set up by the driver."""
        return self._keep(self.driver.connect(autocommit=True, executor=executor))

    def enqueue(self, *tasks: dict[str, Any], **task: Any) -> Any:
        """Committed tasks (each ``TASK`` with changes) through QueueClient: their ids, or the id."""
        if self._enqueuer is None:
            self._enqueuer = self.client_conn()
        client = self.client(self._enqueuer)
        if tasks:
            ids: Any = client.insert_tasks([dict(TASK, **t) for t in tasks])
        else:
            ids = client.insert_task(**dict(TASK, **task))
        self._enqueuer.commit()
        return ids

    def claim(self, conn: Any) -> Any:
        """One task claimed as this store's runtime claims it (TaskRecord or None); its
        transaction is open. Without session locks: claim_uncommitted, then commit_and_begin
        (the socket server's lock is taken in between)."""
        if self.driver.capabilities.session_locks:
            claimed = self.store.claim(conn)
            return None if claimed is None else claimed.task
        task = self.store.claim_uncommitted(conn)
        if task is not None:
            self.store.commit_and_begin(conn)
        return task

    def unlock(self, conn: Any, task_id: int) -> None:
        """A task's liveness lock released, where the database holds it."""
        if self.driver.capabilities.session_locks:
            self.store.unlock_task(conn, task_id)

    # -- what is committed, read by the admin connection --

    def execute(self, sql: str, args: Any = None) -> int:
        return execute(self.admin, sql, args)

    def value(self, sql: str, args: Any = None) -> Any:
        return value(self.admin, sql, args)

    def rows(self) -> list[dict[str, Any]]:
        return [normalize(r) for r in fetch(self.admin, f"SELECT * FROM {self.table} ORDER BY id")]

    def row(self, task_id: int) -> dict[str, Any] | None:
        found = fetch(self.admin, f"SELECT * FROM {self.table} WHERE id = %s", (task_id,))
        return normalize(found[0]) if found else None

    def claimed_row(self, store: Any, reader: Any, task_id: int) -> dict[str, Any] | None:
        """A task as a claim returns it: get_task's row (QUEUE_COLUMNS), then its
        trace_context, overrides and lock_key (model.CLAIMED_COLUMNS)."""
        row = store.get_task(reader, task_id)
        if row is None:
            return None
        extra = ("trace_context", *model.OVERRIDE_COLUMNS, "lock_key")
        found = fetch(
            self.admin, f"SELECT {', '.join(extra)} FROM {self.table} WHERE id = %s", (task_id,)
        )[0]
        return {**row, **{c: found[c] for c in extra}}

    def statuses(self) -> dict[int, str]:
        return {r["id"]: r["status"] for r in self.rows()}

    def count(self, where: str = "TRUE") -> int:
        return int(self.value(f"SELECT count(*) FROM {self.table} WHERE {where}"))

    def set_status(self, status: str, *ids: int) -> None:
        for task_id in ids:
            self.execute(f"UPDATE {self.table} SET status = %s WHERE id = %s", (status, task_id))

    def now(self) -> datetime.datetime:
        sql = (
            "SELECT clock_timestamp()" if self.dialect == "postgres" else "SELECT UTC_TIMESTAMP(6)"
        )
        return normalize({"now": self.value(sql)})["now"]

    def table_exists(self) -> bool:
        return bool(
            self.value(
                "SELECT count(*) FROM information_schema.tables "
                "WHERE table_schema = %s AND table_name = %s",
                (self.table.split(".")[0], self.queue.name),
            )
        )

    # -- sessions --

    def in_transaction(self, conn: Any) -> bool:
        if self.dialect == "postgres":
            return databases.transaction_status(conn) != "IDLE"
        return bool(value(conn, "SELECT @@in_transaction"))

    def session_id(self, conn: Any) -> int:
        if self.dialect == "mysql":
            return int(conn.thread_id())
        if hasattr(conn, "info"):
            return int(conn.info.backend_pid)
        return int(conn.get_backend_pid())  # psycopg2

    def sent_marker(self, conn: Any) -> Any:
        """What tells whether ``conn`` sends a statement from now on (see ``sent_since``)."""
        if self.dialect == "postgres":
            return databases.transaction_status(conn)
        return mysql_helpers.questions(conn)

    def sent_since(self, conn: Any, marker: Any) -> bool:
        """Whether ``conn`` sent a statement since ``sent_marker`` (ask once per marker): on
        PostgreSQL the first statement of a connection that is not autocommit opens a
        transaction; MySQL counts them."""
        if self.dialect == "postgres":
            return databases.transaction_status(conn) != marker
        return mysql_helpers.questions(conn) - marker > 1  # the count's own query counts

    def set_time_zone(self, conn: Any, offset: str) -> None:
        """The session's time zone, as a UTC offset such as ``-03:00``."""
        if self.dialect == "postgres":
            execute(conn, f"SET TIME ZONE INTERVAL '{offset}' HOUR TO MINUTE")
        else:
            execute(conn, f"SET time_zone = '{offset}'")

    def liveness_lock_holder(self, task_id: int) -> int | None:
        """The session holding a task's liveness lock in the database (None when free, and
        always without session locks: the socket server holds them)."""
        if not self.driver.capabilities.session_locks:
            return None
        if self.dialect == "mysql":
            name = self.store.task_lock_name(self.admin, task_id)
            return self.value("SELECT IS_USED_LOCK(%s)", (name,))
        return self.value(
            "SELECT max(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 2",
            (self.store.queue_number, task_id % 2**31),
        )

    def lock_elsewhere(self, conn: Any, task_id: int) -> None:
        """Take a task's liveness lock on ``conn``, as a worker of another version would."""
        if self.dialect == "mysql":
            name = self.store.task_lock_name(conn, task_id)
            assert value(conn, "SELECT GET_LOCK(%s, 0)", (name,)) == 1
        else:
            keys = (queue_lock_key(self.store.queue_number), task_id % 2**31)
            assert value(conn, "SELECT pg_try_advisory_lock(%s, %s)", keys) is True

    def terminate(self, conn: Any) -> None:
        """End ``conn``'s server session and wait until its locks are gone."""
        self.driver.terminate_session(self.admin, conn)
        session = self.session_id(conn)
        if self.dialect == "postgres":
            sql = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
        else:
            sql = "SELECT count(*) FROM information_schema.processlist WHERE id = %s"
        deadline = time.monotonic() + 10
        while self.value(sql, (session,)) and time.monotonic() < deadline:
            time.sleep(0.02)

    # -- the queue's claim routine (PostgreSQL function, MySQL procedure) --

    @property
    def claim_routine(self) -> str:
        name = claim_routine_name(self.table)
        assert name is not None
        return name

    def drop_claim_routine(self) -> None:
        self.execute(
            databases.drop_claim_routine_sql(self.dialect == "postgres", self.claim_routine)
        )

    def comment_claim_routine(self, comment: str) -> None:
        postgres = self.dialect == "postgres"
        self.execute(databases.comment_claim_routine_sql(postgres, self.claim_routine, comment))

    @contextlib.contextmanager
    def failing_updates_to(self, status: str, message: str) -> Iterator[None]:
        """While inside, every UPDATE that sets ``status`` fails with ``message`` (a trigger)."""
        name = f"{self.queue.name}_fails"
        if self.dialect == "postgres":
            self.execute(
                f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.status = '{status}' THEN RAISE EXCEPTION '{message}'; END IF; "
                "RETURN NEW; END $$"
            )
            self.execute(
                f"CREATE TRIGGER {name} BEFORE UPDATE ON {self.table} "
                f"FOR EACH ROW EXECUTE FUNCTION {name}()"
            )
            drop = [f"DROP TRIGGER IF EXISTS {name} ON {self.table}", f"DROP FUNCTION {name}()"]
        else:
            self.execute(
                f"CREATE TRIGGER {name} BEFORE UPDATE ON {self.table} FOR EACH ROW "
                f"IF NEW.status = '{status}' THEN "
                f"SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{message}'; END IF"
            )
            drop = [f"DROP TRIGGER IF EXISTS {self.queue.database}.{name}"]
        try:
            yield
        finally:
            for statement in drop:
                self.execute(statement)

    @contextlib.contextmanager
    def other_namespace(self) -> Iterator[Any]:
        """A second queue in a schema (a database, on MySQL) of its own, dropped afterwards."""
        namespace = databases.unique_queue_name("nsjq_ns_")
        if self.dialect == "postgres":
            self.execute(f"CREATE SCHEMA {namespace}")
            try:
                yield databases.create_queue(self.admin, self.connect_args, schema=namespace)
            finally:
                self.execute(f"DROP SCHEMA {namespace} CASCADE")
        else:
            self.execute(f"CREATE DATABASE {namespace}")
            try:
                yield mysql_helpers.create_queue(self.admin, namespace)
            finally:
                self.execute(f"DROP DATABASE {namespace}")
