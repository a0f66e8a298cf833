"""A clean MariaDB/MySQL queue per test, made by our DDL generator.

Fixtures (import them into a test module to use them):

- ``mysql_admin``: an autocommit PyMySQL connection for fixtures and for
  looking at the database from outside the connection under test;
- ``mysql_queue``: a fresh, uniquely named queue (``db_gen --dialect mysql``)
  in the DSN's database, dropped afterwards;
- ``mysql_conn``: a PyMySQL connection that is not autocommit (the
  caller's transaction of QueueClient tests);
- ``mysql_worker_conn`` / ``mysql_worker_conn_2``: autocommit connections set
  up as the worker runtime sets up its executors' (``configure_session``, executor).

They build on ``mysql_kwargs`` (tests/conftest.py), so they skip (or fail
under CI=true) when TEST_MYSQL_DSN is missing.

``TEST_MYSQL_SERVER_VARIANT=mysql`` makes ``create_queue`` render the MySQL
variant of the DDL (``db_gen --server mysql``) instead of the default
(MariaDB's): MariaDB runs both, so the MariaDB suite can check the variant
that no MySQL 8 server here can run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import pytest

from nsj_queue_lib.db.dialect import CLAIM_ROUTINE_RELEASE, DdlNames
from tests.helpers.databases import (
    CONNECT_TIMEOUT,
    QueueNames,
    days_ahead,
    fixture_days_ahead,
    unique_queue_name,
)

# Fixture statements must never wait long on a lock a broken test left behind.
ADMIN_INIT = "SET SESSION lock_wait_timeout = 15, SESSION innodb_lock_wait_timeout = 15"


@dataclasses.dataclass(frozen=True)
class MysqlQueue(QueueNames):
    """A queue created for one test by our DDL generator."""

    database: str
    dialect: str = "mysql"

    @property
    def namespace(self) -> str:
        return self.database


def connect(kwargs: dict[str, Any], autocommit: bool = False, **extra: Any):
    import pymysql

    return pymysql.connect(
        **kwargs, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT, **extra
    )


def execute_script(conn, sql: str) -> None:
    from nsj_queue_lib.db.mysql.dialect import split_script

    with conn.cursor() as cur:
        for statement in split_script(sql):
            cur.execute(statement)


def create_queue(
    admin,
    database: str,
    name: str | None = None,
    upgrade: bool = False,
    layout: str = "plain",
    days: int | None = None,
) -> MysqlQueue:
    """Create (or upgrade) a queue with ``db_gen --dialect mysql`` on an autocommit connection;
    ``days``: the partitioned layout's days ahead (None: db_gen's)."""
    from nsj_queue_lib.db_gen import render

    queue = MysqlQueue(name or unique_queue_name(), database)
    server = os.environ.get("TEST_MYSQL_SERVER_VARIANT") or None
    with days_ahead(days):
        script = render(
            database, queue.name, "mysql", upgrade=upgrade, server=server, layout=layout
        )
    execute_script(admin, script)
    return queue


def drop_queue_tables(admin, database: str, name: str) -> None:
    with admin.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {database}.{name}")
        cur.execute(f"DROP TABLE IF EXISTS {database}.{name}_subscriber")
        cur.execute(f"DROP TABLE IF EXISTS {database}.{name}_periodic")
        cur.execute(f"DROP TABLE IF EXISTS {database}.{name}_workers")
        for suffix in ("_tally", "_tally_open", "_tally_state"):
            cur.execute(f"DROP TABLE IF EXISTS {database}.{name}{suffix}")
        cur.execute(f"DROP TABLE IF EXISTS {database}.{name}_parents")
        cur.execute(f"DROP TABLE IF EXISTS {database}.{name}_waiting")
        cur.execute(f"DROP TABLE IF EXISTS {database}.{name}_workflows")
        cur.execute(f"DROP TABLE IF EXISTS {database}.{name}_workflow_tasks")
        cur.execute(f"DROP TABLE IF EXISTS {database}.{name}_steps, {database}.{name}_events")
        for suffix in ("_processes", "_process_tasks", "_process_events"):
            cur.execute(f"DROP TABLE IF EXISTS {database}.{name}{suffix}")
        cur.execute(f"DROP PROCEDURE IF EXISTS {database}.release_{name}")
        for release in range(1, CLAIM_ROUTINE_RELEASE + 1):
            routine = DdlNames.routine_name(name, release)
            cur.execute(f"DROP PROCEDURE IF EXISTS {database}.{routine}")


def mysql_settings(kwargs: dict[str, Any], table: str, **changes: Any):
    """``Settings`` of a worker on the MySQL queue ``table`` (``database.name``)."""
    from nsj_queue_lib.settings import Settings

    return Settings(
        db_driver="MYSQL",
        db_host=kwargs["host"],
        db_port=kwargs["port"],
        db_name=kwargs["database"],
        db_user=kwargs["user"],
        db_pass=kwargs.get("password") or "",
        queue_name=table.split(".")[-1],
        queue_table=table,
        **changes,
    )


def fetch_dicts(conn, sql: str, args: Any = None) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        names = [c[0] for c in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def fetch_value(conn, sql: str, args: Any = None) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()[0]


def row_of(conn, table: str, task_id: int) -> dict[str, Any] | None:
    rows = fetch_dicts(conn, f"SELECT * FROM {table} WHERE id = %s", (task_id,))
    return rows[0] if rows else None


def count_rows(conn, table: str) -> int:
    return fetch_value(conn, f"SELECT count(*) FROM {table}")


def questions(conn) -> int:
    """Statements this session has sent so far (the query asking counts itself)."""
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Questions'")
        return int(cur.fetchone()[1])


def in_transaction(conn) -> bool:
    return bool(fetch_value(conn, "SELECT @@in_transaction"))


# -- fixtures --------------------------------------------------------------------


@pytest.fixture
def mysql_admin(mysql_kwargs):
    conn = connect(mysql_kwargs, autocommit=True, init_command=ADMIN_INIT)
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def mysql_queue(mysql_kwargs, mysql_admin):
    queue = create_queue(mysql_admin, mysql_kwargs["database"])
    try:
        yield queue
    finally:
        drop_queue_tables(mysql_admin, queue.database, queue.name)


@pytest.fixture
def mysql_partitioned_queue(request, mysql_kwargs, mysql_admin):
    """A fresh queue of the partitioned layout (db/mysql/layout.py), with few days ahead
    (``databases.fixture_days_ahead``)."""
    queue = create_queue(
        mysql_admin,
        mysql_kwargs["database"],
        layout="partitioned",
        days=fixture_days_ahead(request),
    )
    try:
        yield queue
    finally:
        drop_queue_tables(mysql_admin, queue.database, queue.name)


@pytest.fixture
def mysql_conn(mysql_kwargs, mysql_queue):
    # Depends on mysql_queue so that it is closed before the queue is dropped:
    # an open transaction would otherwise hold a lock the DROP waits for.
    conn = connect(mysql_kwargs, autocommit=False)
    try:
        yield conn
    finally:
        conn.close()  # an open transaction is rolled back by the server


@contextlib.contextmanager
def _worker_conn(mysql_kwargs, queue: MysqlQueue) -> Iterator[Any]:
    from nsj_queue_lib.db.mysql.driver import configure_session

    # As the driver opens its executors' connections (MysqlDriver.connect(executor=True)).
    conn = connect(mysql_kwargs, autocommit=True)
    try:
        if queue.dialect == "mysql":  # SingleStore sessions need no set-up
            configure_session(conn, executor=True)
        yield conn
    finally:
        conn.close()


@pytest.fixture
def mysql_worker_conn(mysql_kwargs, mysql_queue):
    with _worker_conn(mysql_kwargs, mysql_queue) as conn:
        yield conn


@pytest.fixture
def mysql_worker_conn_2(mysql_kwargs, mysql_queue):
    with _worker_conn(mysql_kwargs, mysql_queue) as conn:
        yield conn
