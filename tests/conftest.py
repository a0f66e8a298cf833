"""Fixtures shared by every test: the databases and a clean queue per test.

- ``pg_dsn`` (session): PostgreSQL from ``TEST_PG_DSN``, else an embedded
  throwaway server (pgserver), so the suite runs on a machine with no database.
- ``pg_admin`` (session): an autocommit psycopg 3 connection for fixtures.
- ``pg_queue`` (function): a fresh, uniquely named queue made by our DDL
  generator; its tables and trigger function are dropped afterwards.
- ``pg_autocommit`` (function): an autocommit psycopg 3 connection to look at
  the database from outside the connection under test.
- ``mysql_dsn`` (session): ``TEST_MYSQL_DSN``; skips with the reason when it is
  missing or unreachable, fails instead under ``CI=true``; ``mysql_kwargs``
  gives its PyMySQL ``connect()`` arguments.
- ``galera_cluster`` (module): a private 3-node MariaDB Galera cluster
  (``tests/helpers/galera.py``); skips with the reason where galera-4 or
  MariaDB is missing, fails instead under ``CI=true``.

The logic lives in ``tests/helpers/databases.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # makes ``tests.helpers`` importable in any import mode
    sys.path.insert(0, str(ROOT))

from tests.helpers import databases  # noqa: E402 - needs the sys.path entry above

# Fixtures that live beside their helpers, available to every test module.
pytest_plugins = [
    "tests.helpers.mysql_queue",
    "tests.helpers.server_process",
    "tests.helpers.legacy",
    "tests.helpers.galera",
    "tests.helpers.skip_summary",
]


def pytest_configure(config) -> None:
    """Compile the library and the tests' worker scripts once, before any test starts a
    process. With ``PYTHONDONTWRITEBYTECODE=1`` (this machine's default, and many CI
    images') nothing writes ``.pyc`` files, so each of the suite's hundreds of worker
    processes compiled every module it imported again (about 0.1 s of each start).
    ``compileall`` writes them whatever that variable says; the xdist workers skip it.

    The same variable stopped pytest from caching its rewritten test modules: every xdist
    worker rewrote and compiled all of them again, 9.6 s of collection against 1.9 s
    cached. Bytecode is written in this process and each worker from here on."""
    sys.dont_write_bytecode = False
    if hasattr(config, "workerinput"):
        return
    import compileall

    for folder in ("nsj_queue_lib", "tests"):
        compileall.compile_dir(ROOT / folder, quiet=2)


def _unavailable(reason: str) -> None:
    """Skip, or fail under CI=true, because a test database is missing."""
    if databases.ci_enabled():
        pytest.fail(f"{reason} (CI=true: a missing database fails the run)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_dsn():
    dsn = os.environ.get("TEST_PG_DSN", "").strip()
    if dsn:
        try:
            databases.check_pg(dsn)
        except databases.DatabaseUnavailable as exc:
            # An explicitly configured database that does not answer is a
            # broken set-up, in CI or not: never fall back silently.
            pytest.fail(f"{exc} (unset TEST_PG_DSN to use an embedded PostgreSQL)", pytrace=False)
        yield dsn
        return
    try:
        server = databases.EmbeddedPostgres()
    except databases.DatabaseUnavailable as exc:
        _unavailable(str(exc))
    try:
        yield server.dsn
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_admin(pg_dsn):
    import psycopg

    conn = psycopg.connect(
        pg_dsn,
        autocommit=True,
        connect_timeout=databases.CONNECT_TIMEOUT,
        options=databases.ADMIN_OPTIONS,
    )
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def pg_queue(pg_dsn, pg_admin):
    queue = databases.create_queue(pg_admin, pg_dsn)
    try:
        yield queue
    finally:
        databases.drop_queue(pg_admin, queue)


@pytest.fixture
def pg_partitioned_queue(request, pg_dsn, pg_admin):
    """A fresh queue of the partitioned layout (db/postgres/layout.py), with few days ahead
    (``databases.fixture_days_ahead``)."""
    queue = databases.create_queue(
        pg_admin, pg_dsn, layout="partitioned", days=databases.fixture_days_ahead(request)
    )
    try:
        yield queue
    finally:
        databases.drop_queue(pg_admin, queue)


@pytest.fixture
def pg_autocommit(pg_dsn):
    conn = databases.connect_pg(pg_dsn, "psycopg", autocommit=True)
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture(scope="session")
def mysql_dsn():
    try:
        return databases.resolve_mysql()
    except databases.DatabaseUnavailable as exc:
        _unavailable(str(exc))
    except ValueError as exc:
        pytest.fail(f"TEST_MYSQL_DSN is malformed: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def mysql_kwargs(mysql_dsn):
    """PyMySQL connect() keyword arguments for ``mysql_dsn``."""
    return databases.mysql_connect_kwargs(mysql_dsn)
