"""The contract suite's backends: one fixture, every test runs on each of them.

``backend`` is parametrized over:

- ``postgres``: DB_DRIVER=POSTGRES, wake-ups by LISTEN, liveness and
  maintenance locks as advisory locks;
- ``postgres-via-server``: the same database with CLIENT_SERVER_MODE=true
  and a socket server (``python -m nsj_queue_lib.server``) on the queue;
- ``mysql``: DB_DRIVER=MYSQL on MariaDB, wake-ups by polling
  (QUEUE_POLL_INTERVAL), locks with GET_LOCK;
- ``singlestore-via-server``: DB_DRIVER=SINGLE_STORE on MariaDB (SingleStore
  cannot run here): claims by conditional update, every lock and wake-up from
  a socket server whose check-tasks thread polls the MariaDB table. The tables
  are ``db_gen --dialect singlestore``'s, minus what only SingleStore parses
  (``ROWSTORE``, ``SHARD KEY``): DATETIME(6) columns, as on SingleStore.

The MariaDB-backed parameters need ``TEST_MYSQL_DSN``: they skip with the
reason when it is unset, and fail under ``CI=true`` (the ``mysql_dsn``
fixture's rule).

Each test gets a fresh queue (queue table, subscriber table, and two side
tables the handlers write: ``<queue>_exec``, one row per committed execution,
and ``<queue>_started``), and, for the ``-via-server`` parameters, its own
server process. Everything a test starts (in-process workers, worker
processes, the server) is stopped and every table dropped afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import re
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nsj_queue_lib.db.dialect import CLAIM_ROUTINE_RELEASE, DdlNames, tally_table_names
from nsj_queue_lib.queue_client import QueueClient
from nsj_queue_lib.settings import Settings
from tests.helpers import queue_pool
from tests.helpers.databases import (
    drop_queue_objects,
    insert_subscriber,
    mysql_connect_kwargs,
    unique_queue_name,
)
from tests.helpers.mysql_queue import execute_script
from tests.helpers.processes import (
    QUIET_ENV,
    QUIET_SETTINGS,
    InProcessWorker,
    WorkerProcess,
    dsn_params,
    wait_for,
    with_overrides,
)
from tests.helpers.server_process import ServerProcess

WORKER_SCRIPT = Path(__file__).resolve().parent / "workers" / "contract_worker.py"
UTC = datetime.timezone.utc

# The partitioned layout (db/postgres/layout.py, db/mysql/layout.py) runs the contract
# only where NSJQ_CONTRACT_LAYOUTS asks for it (make test runs its own tests of the layout).
BACKENDS = [
    pytest.param("postgres", id="postgres"),
    *(
        [pytest.param("postgres-partitioned", id="postgres-partitioned")]
        if "partitioned" in os.environ.get("NSJQ_CONTRACT_LAYOUTS", "")
        else []
    ),
    pytest.param("postgres-via-server", id="postgres-via-server"),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
    *(
        [pytest.param("mysql-partitioned", id="mysql-partitioned", marks=pytest.mark.mysql)]
        if "partitioned" in os.environ.get("NSJQ_CONTRACT_LAYOUTS", "")
        else []
    ),
    pytest.param("singlestore-via-server", id="singlestore-via-server", marks=pytest.mark.mysql),
]

# Library bugs a backend fails on are pinned as strict xfail by ``known_bug`` (none at present).


def known_bug(reason: str, *kinds: str):
    """Mark a contract test as failing on ``kinds`` because of a library bug (strict xfail there)."""

    def mark(func):
        bugs = dict(getattr(func, "_contract_bugs", {}))
        bugs.update(dict.fromkeys(kinds, reason))
        func._contract_bugs = bugs
        return func

    return mark


BOOLEAN_COLUMNS = (
    "reenfileirado",
    "estouro_tentativas",
    "pub_sub",
    "dead",
    "ativo",
    "cancel_requested",
)
FINAL_STATUSES = ("sucesso", "falha", "falha_processando")


def singlestore_ddl_for_mariadb(sql: str) -> str:
    """``db_gen --dialect singlestore`` output without the two clauses only SingleStore parses."""
    sql = sql.replace("CREATE ROWSTORE TABLE", "CREATE TABLE")
    return re.sub(r"^\s*SHARD KEY \([^)]*\),\s*\n", "", sql, flags=re.MULTILINE)


@dataclasses.dataclass
class Backend:
    """One backend of the contract: a fresh queue on its database, and ways to drive it."""

    kind: str  # postgres | postgres-via-server | mysql | singlestore-via-server
    dsn: str
    directory: Path
    name: str = dataclasses.field(default_factory=lambda: unique_queue_name("cq_"))
    server: ServerProcess | None = None

    def __post_init__(self) -> None:
        self.family = "postgres" if self.kind.startswith("postgres") else "mysql"
        self.driver = {
            "postgres": "POSTGRES",
            "postgres-via-server": "POSTGRES",
            "postgres-partitioned": "POSTGRES",
            "mysql": "MYSQL",
            "mysql-partitioned": "MYSQL",
            "singlestore-via-server": "SINGLE_STORE",
        }[self.kind]
        self.via_server = self.kind.endswith("-via-server")
        if self.family == "postgres":
            params = dsn_params(self.dsn)
            name, self.schema = params["dbname"], "public"
        else:
            params = mysql_connect_kwargs(self.dsn)
            name = self.schema = params["database"]
        self.db = dict(
            host=params["host"],
            port=int(params["port"]),
            name=name,
            user=params["user"],
            password=params["password"],
        )
        self.table = f"{self.schema}.{self.name}"
        self.subscriber_table = f"{self.table}_subscriber"
        self.exec_table = f"{self.table}_exec"
        self.started_table = f"{self.table}_started"
        self._inprocess: list[InProcessWorker] = []
        self._processes: list[WorkerProcess] = []
        self.admin = self.connect(autocommit=True)

    # -- connections and SQL ---------------------------------------------------------------

    def connect(self, autocommit: bool = False):
        """A new DB-API connection (psycopg 3 or PyMySQL) to the backend's database."""
        if self.family == "postgres":
            import psycopg

            return psycopg.connect(self.dsn, autocommit=autocommit, connect_timeout=5)
        import pymysql

        conn = pymysql.connect(
            **mysql_connect_kwargs(self.dsn), autocommit=autocommit, connect_timeout=5
        )
        if self.driver == "MYSQL":
            # TIMESTAMP columns read in UTC, as on the workers' sessions.
            with conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
        return conn

    def query(self, sql: str, args: Any = None, conn=None) -> list[dict[str, Any]]:
        conn = conn or self.admin
        with conn.cursor() as cur:
            cur.execute(sql, args)
            if cur.description is None:
                return []
            names = [c[0] for c in cur.description]
            return [self._normalize(dict(zip(names, row, strict=True))) for row in cur.fetchall()]

    def value(self, sql: str, args: Any = None, conn=None) -> Any:
        rows = self.query(sql, args, conn)
        return next(iter(rows[0].values())) if rows else None

    def execute(self, sql: str, args: Any = None, conn=None) -> None:
        conn = conn or self.admin
        with conn.cursor() as cur:
            cur.execute(sql, args)

    def _normalize(self, row: dict[str, Any]) -> dict[str, Any]:
        """Same Python types on every backend: bools for booleans, aware datetimes, bytes."""
        if self.family == "mysql":
            for column in BOOLEAN_COLUMNS:
                if column in row and row[column] is not None:
                    row[column] = bool(row[column])
            for column, value in row.items():
                if isinstance(value, datetime.datetime) and value.tzinfo is None:
                    row[column] = value.replace(
                        tzinfo=UTC
                    )  # worker sessions and the server use UTC
                elif isinstance(value, (bytearray, memoryview)):
                    row[column] = bytes(value)
        return row

    @property
    def now_sql(self) -> str:
        return "SELECT clock_timestamp()" if self.family == "postgres" else "SELECT NOW(6)"

    def now(self, conn=None) -> datetime.datetime:
        """The database's clock (aware), on ``conn`` (a handler's) or the admin connection."""
        return self.value(self.now_sql, conn=conn)

    # -- the queue -----------------------------------------------------------------------------

    def create(self) -> None:
        from nsj_queue_lib.db_gen import render

        layout = "partitioned" if self.kind.endswith("-partitioned") else "plain"
        if self.family == "postgres":
            self.admin.execute(render(self.schema, self.name, layout=layout))
            self.admin.execute(
                f"CREATE TABLE {self.exec_table} (task_id bigint NOT NULL, chave text, pid integer, "
                f"at timestamptz NOT NULL DEFAULT clock_timestamp());"
                f"CREATE TABLE {self.started_table} (task_id bigint NOT NULL, pid integer, "
                f"at timestamptz NOT NULL DEFAULT clock_timestamp())"
            )
            return
        with self.admin.cursor() as cur:
            cur.execute("SET SESSION lock_wait_timeout = 15, SESSION innodb_lock_wait_timeout = 15")
        if self.driver == "SINGLE_STORE":
            ddl = singlestore_ddl_for_mariadb(render(self.schema, self.name, "singlestore"))
        else:
            # TEST_MYSQL_SERVER_VARIANT=mysql: db_gen --server mysql's DDL (tests/helpers/mysql_queue.py).
            server = os.environ.get("TEST_MYSQL_SERVER_VARIANT") or None
            ddl = render(self.schema, self.name, "mysql", server=server, layout=layout)
        execute_script(self.admin, ddl)
        self.execute(
            f"CREATE TABLE {self.exec_table} (task_id bigint NOT NULL, chave varchar(200), "
            f"pid integer, at timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB"
        )
        self.execute(
            f"CREATE TABLE {self.started_table} (task_id bigint NOT NULL, pid integer, "
            f"at timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB"
        )

    @property
    def pooled(self) -> Any:
        """The queue as tests/helpers/queue_pool.py names it."""
        return SimpleNamespace(
            name=self.name, schema=self.schema, database=self.schema, table=self.table
        )

    def fingerprint(self) -> str:
        if self.family == "postgres":
            return queue_pool.pg_fingerprint(self.admin, self.pooled)
        return queue_pool.mysql_fingerprint(self.admin, self.pooled)

    def empty(self) -> bool:
        """As a fresh queue: no rows in any of its tables; False when it cannot be reused."""
        if self.family == "postgres":
            if not queue_pool.sessions_ended(self.admin, self.pooled, [], postgres=True):
                return False
            queue_pool.pg_empty(self.admin, self.pooled)
        else:
            # Ids go on: a handler thread a test left behind (blocked past its end) may hold
            # the GET_LOCK of a task id, which MariaDB does not let us look for, while
            # PostgreSQL's advisory locks are waited for above.
            queue_pool.mysql_empty(self.admin, self.pooled, restart_ids=False)
        return True

    def drop(self) -> None:
        if self.family == "postgres":
            drop_queue_objects(self.admin, self.schema, self.name)
            self.admin.execute(
                f"DROP TABLE IF EXISTS {self.exec_table}; DROP TABLE IF EXISTS {self.started_table}"
            )
            return
        tables = (self.table, self.subscriber_table, self.exec_table, self.started_table)
        for table in (
            *tables,
            f"{self.table}_periodic",
            f"{self.table}_limits",
            f"{self.table}_workers",
            f"{self.table}_parents",
            f"{self.table}_waiting",
            f"{self.table}_workflows",
            f"{self.table}_workflow_tasks",
            f"{self.table}_steps",
            f"{self.table}_events",
            f"{self.table}_processes",
            f"{self.table}_process_tasks",
            f"{self.table}_process_events",
            *tally_table_names(self.table),
        ):
            self.execute(f"DROP TABLE IF EXISTS {table}")
        self.execute(f"DROP PROCEDURE IF EXISTS {self.schema}.release_{self.name}")
        for release in range(1, CLAIM_ROUTINE_RELEASE + 1):
            routine = DdlNames.routine_name(self.name, release)
            self.execute(f"DROP PROCEDURE IF EXISTS {self.schema}.{routine}")

    def client(self, conn) -> QueueClient:
        return QueueClient(conn, self.table, self.subscriber_table)

    @contextlib.contextmanager
    def transaction(self):
        """A non-autocommit connection; committed when the block ends without an error."""
        conn = self.connect()
        try:
            yield conn
            conn.commit()
        finally:
            conn.close()

    def enqueue(self, tasks: list[dict[str, Any]], bulk: bool = False) -> list[int]:
        """Insert tasks with QueueClient in one committed transaction; their ids."""
        defaults = dict(
            origem="teste", destino="worker", processo="processar", chave_externa=None, payload="x"
        )
        full = [{**defaults, **task} for task in tasks]
        with self.transaction() as conn:
            client = self.client(conn)
            return client.insert_tasks(full) if bulk else [client.insert_task(**t) for t in full]

    def rows(self, where: str = "1 = 1", args: Any = None) -> list[dict[str, Any]]:
        return self.query(f"SELECT * FROM {self.table} WHERE {where} ORDER BY id", args)

    def row(self, task_id: int) -> dict[str, Any]:
        [found] = self.rows("id = %s", (task_id,))
        return found

    def statuses(self) -> dict[str, int]:
        return {
            r["status"]: int(r["n"])
            for r in self.query(f"SELECT status, count(*) AS n FROM {self.table} GROUP BY status")
        }

    def wait_statuses(self, expected: dict[str, int], timeout: float, what: str) -> None:
        seen: list[dict[str, int]] = []

        def reached() -> bool:
            seen[:] = [self.statuses()]
            return seen[0] == expected

        try:
            wait_for(reached, timeout, f"{what} ({expected})")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the statuses were {seen[0] if seen else None}") from None

    def exec_rows(self) -> list[dict[str, Any]]:
        return self.query(f"SELECT task_id, chave, pid FROM {self.exec_table} ORDER BY at, task_id")

    def started_ids(self) -> list[int]:
        return [
            r["task_id"]
            for r in self.query(f"SELECT task_id FROM {self.started_table} ORDER BY at")
        ]

    def add_subscriber(self, subscriber_id: str, processo: str, **columns: Any) -> None:
        """A subscriber row (columns: url, http_method, headers, ativo, tenant, grupo_empresarial)."""
        insert_subscriber(self.execute, self.subscriber_table, subscriber_id, processo, **columns)

    # -- the socket server -------------------------------------------------------------------

    def start_server(self) -> ServerProcess:
        env = {
            "DB_DRIVER": self.driver,
            "DB_HOST": self.db["host"],
            "DB_PORT": str(self.db["port"]),
            "DB_BASE": self.db["name"],
            "DB_USER": self.db["user"],
            "QUEUE_NAME": self.name,
            "QUEUE_TABLE": self.table,
            "CHECK_TASKS_INTERVAL": "0.1",
            "LOG_DEBUG": "false",
        }
        if self.db["password"]:
            env["DB_PASS"] = self.db["password"]
        self.server = ServerProcess(self.directory / "server", env=env).start()
        # "server ready" comes before the check-tasks thread has connected (and, on
        # PostgreSQL, LISTENs): a NOTIFY sent before that is never relayed.
        if not self.server.wait_for_log("check-tasks: connected", timeout=15):
            raise AssertionError(
                f"the server's check-tasks thread did not connect:\n{self.server.log_text()}"
            )
        return self.server

    # -- workers -------------------------------------------------------------------------------

    def settings(self, **changes: Any) -> Settings:
        """Settings of an in-process worker on this queue: short intervals, services off.

        QUEUE_WAIT_NOTIFY_INTERVAL is 60 s: no test passes thanks to the periodic look.
        """
        values: dict[str, Any] = dict(
            db_driver=self.driver,
            db_host=self.db["host"],
            db_port=self.db["port"],
            db_name=self.db["name"],
            db_user=self.db["user"],
            db_pass=self.db["password"],
            queue_name=self.name,
            queue_table=self.table,
            queue_subscriber_table=self.subscriber_table,
            queue_poll_interval=0.1,
            **QUIET_SETTINGS,
            default_webhook_timeout=2.0,
        )
        if self.via_server:
            values.update(
                client_server_mode=True,
                server_host="127.0.0.1",
                notify_service_port=self.server.notify_port,
                lock_service_port=self.server.lock_port,
                # The retry service waits 2 x TIMEOUT_SOCKET_MESSAGE + 1 s before it
                # rescues a task whose server lock is free: 3 s here.
                queue_server_token=self.server.token,
                timeout_socket_message=1.0,
            )
        values.update(changes)
        return Settings(**values)

    def env(self, **overrides: Any) -> dict[str, str]:
        """The environment of a worker process (``contract_worker.py``) on this queue."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DB_", "DATABASE_", "QUEUE_", "CLIENT_SERVER_MODE", "CONTRACT_"))
        }
        env.update(
            DB_DRIVER=self.driver,
            DB_HOST=self.db["host"],
            DB_PORT=str(self.db["port"]),
            DB_BASE=self.db["name"],
            DB_USER=self.db["user"],
            DB_PASS=self.db["password"],
            QUEUE_NAME=self.name,
            QUEUE_TABLE=self.table,
            QUEUE_SUBSCRIBER_TABLE=self.subscriber_table,
            QUEUE_POLL_INTERVAL="0.1",
            **QUIET_ENV,
            QUEUE_GRACE_PERIOD="5",
            CONTRACT_EXEC_TABLE=self.exec_table,
            CONTRACT_STARTED_TABLE=self.started_table,
            PYTHONUNBUFFERED="1",
            LOG_DEBUG="false",
        )
        if self.via_server:
            env.update(
                CLIENT_SERVER_MODE="true",
                SERVER_HOST="127.0.0.1",
                NOTIFY_SERVICE_PORT=str(self.server.notify_port),
                LOCK_SERVICE_PORT=str(self.server.lock_port),
                QUEUE_SERVER_TOKEN=self.server.token,
                TIMEOUT_SOCKET_MESSAGE="5",
            )
        return with_overrides(env, overrides)

    def contract_worker(self, **changes: Any):
        """An in-process ``ContractWorker`` (the process script's class) on this queue."""
        from tests.contract.workers.contract_worker import ContractWorker

        return ContractWorker(
            self.settings(**changes),
            exec_table=self.exec_table,
            started_table=self.started_table,
            ready_file="",
        )

    def function_worker(self, execute, execute_dead=None, **changes: Any):
        from tests.helpers.processes import function_worker

        return function_worker(self.settings(**changes), execute, execute_dead)

    def run(self, worker, wait_ready: bool = True) -> InProcessWorker:
        """Run a ``WorkerBase`` in a thread of this process; it is stopped at the end of the test."""
        running = InProcessWorker(worker).start()
        self._inprocess.append(running)
        if wait_ready:
            wait_for(
                lambda: (
                    running.error is not None
                    or (
                        worker._runtime is not None
                        and worker._runtime.dispatcher._control is not None
                    )
                ),
                15,
                "the in-process worker's dispatcher to connect",
            )
            if running.error is not None:
                raise AssertionError(
                    f"the worker failed to start: {running.error!r}"
                ) from running.error
        return running

    def start_process(
        self, name: str, wait_ready: bool = True, script: Path = WORKER_SCRIPT, **overrides: Any
    ) -> WorkerProcess:
        """``contract_worker.py`` (or ``script``) as a real process; waits until its dispatcher
        is connected."""
        ready = self.directory / f"{name}.ready"
        proc = WorkerProcess(script, self.env(CONTRACT_READY_FILE=ready, **overrides), name)
        self._processes.append(proc)
        if wait_ready:
            self.wait_processes_ready([proc])
        return proc

    def wait_processes_ready(self, procs: list[WorkerProcess], timeout: float = 30) -> None:
        def ready() -> bool:
            for proc in procs:
                if not proc.alive():
                    raise AssertionError(
                        f"{proc.name} exited with {proc.proc.returncode}:\n{proc.output()[-3000:]}"
                    )
            return all((self.directory / f"{proc.name}.ready").exists() for proc in procs)

        wait_for(ready, timeout, f"{len(procs)} worker process(es) to connect")

    def process_logs(self) -> str:
        return "\n".join(
            f"--- {p.name} (pid {p.pid}) ---\n{p.output()[-3000:]}" for p in self._processes
        )

    # -- clean-up ------------------------------------------------------------------------------

    def close(self, drop: bool = True) -> None:
        """Everything the test started stopped; the queue dropped and the admin connection
        closed, unless ``drop`` is false (the pool may keep the queue, conftest.py)."""
        errors = []
        for running in self._inprocess:
            if running.alive():
                try:
                    running.stop()
                except AssertionError as exc:
                    errors.append(str(exc))
        for proc in self._processes:
            proc.close()
        if self.server is not None:
            self.server.cleanup()
        if drop:
            try:
                self.drop()
            finally:
                self.admin.close()
        if errors:
            raise AssertionError("; ".join(errors))


def seconds(delta: datetime.timedelta) -> float:
    return delta.total_seconds()


def counts(values) -> dict:
    return dict(Counter(values))
