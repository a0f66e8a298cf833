"""Fixtures of the store conformance suite: every test runs on each backend it names.

- ``backend``: an empty queue and its store (``backends.Backend``); by default
  on the stores with session locks (``postgres``, ``mysql``); a module or a
  test names others with ``backends.on(...)`` (the test's choice wins). The
  queue is the xdist worker's for its layout, emptied after each test, or a new
  one after a test that changed its catalog (``tests/helpers/queue_pool.py``); a test marked
  ``fresh_queue`` (or ``full_days_ahead``) gets one made for it alone;
- ``conn`` / ``client``: a caller's connection (never autocommit) and a
  ``QueueClient`` on it;
- ``worker``: an executor's connection, as the runtime opens it;
- ``store``: the backend's store, bound to the queue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import databases
from tests.helpers import mysql_queue as mysql_helpers
from tests.helpers import queue_pool as pool_sql
from tests.helpers.queue_pool import QueuePool, QueueWays
from tests.integration.store.backends import LOCKING, Backend


def pytest_configure(config):
    config.addinivalue_line("markers", "backends(*kinds): the backends a store test runs on")


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        chosen = metafunc.definition.get_closest_marker("backends")
        metafunc.parametrize("backend", chosen.args if chosen else LOCKING, indirect=True)


@pytest.fixture(scope="session", autouse=True)
def one_tls_context():
    """PyMySQL (1.2) builds a TLS context for every connection it opens, even when the
    server offers no TLS: some 25 ms of CPU loading the system's certificates, and a test
    here opens several connections. One context per set of options serves them all."""
    import pymysql.connections

    real = getattr(pymysql.connections.Connection, "_create_ssl_ctx", None)
    if real is None:
        yield
        return
    contexts = {}

    def shared(self, options):
        key = repr(sorted(options.items()))
        if key not in contexts:
            contexts[key] = real(self, options)
        return contexts[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pymysql.connections.Connection, "_create_ssl_ctx", shared)
        yield


# The pool's kinds (tests/helpers/queue_pool.py): the backends on the same DDL share a queue.
POOLED = {
    "postgres": "postgres",
    "psycopg2": "postgres",
    "partitioned": "partitioned",
    "mysql": "mysql",
    "singlestore": "mysql",
    "mysql-partitioned": "mysql-partitioned",
}


def _keep_pool(pool: QueuePool, drop: Callable[[Any], None]):
    yield pool
    for queue, _ in list(pool.kept.values()):
        drop(queue)


# One pool per server, each set up after (so torn down before) its server's fixture: the
# embedded PostgreSQL of a fresh clone stops when pg_dsn is torn down, and its queues
# must be dropped before that.
@pytest.fixture(scope="session")
def pg_queue_pool(pg_dsn):
    def drop(queue):
        # The session's admin connections may be gone by now: a new one.
        with databases.connect_pg(queue.dsn, autocommit=True) as admin:
            databases.drop_queue(admin, queue)

    yield from _keep_pool(QueuePool(), drop)


@pytest.fixture(scope="session")
def mysql_queue_pool(mysql_kwargs):
    def drop(queue):
        admin = mysql_helpers.connect(mysql_kwargs, autocommit=True)
        try:
            mysql_helpers.drop_queue_tables(admin, queue.database, queue.name)
        finally:
            admin.close()

    yield from _keep_pool(QueuePool(), drop)


def _ways(request, kind: str) -> QueueWays:
    if kind in ("postgres", "partitioned"):
        admin = request.getfixturevalue("pg_admin")
        connect_args = request.getfixturevalue("pg_dsn")
    else:
        admin = request.getfixturevalue("mysql_admin")
        connect_args = request.getfixturevalue("mysql_kwargs")
    return QueueWays(kind, admin, connect_args)


def _fresh(request, pool: QueuePool) -> bool:
    """A queue made for this test alone (the fixtures' own), not the pool's."""
    node = request.node
    return pool.fresh_only or any(
        node.get_closest_marker(mark) for mark in ("fresh_queue", "full_days_ahead")
    )


@pytest.fixture
def backend(request):
    kind = request.param
    if request.param in ("postgres", "psycopg2", "partitioned"):
        fixture = "pg_partitioned_queue" if request.param == "partitioned" else "pg_queue"
        admin = request.getfixturevalue("pg_admin")
        connect_args = request.getfixturevalue("pg_dsn")
    else:
        fixture = (
            "mysql_partitioned_queue" if request.param == "mysql-partitioned" else "mysql_queue"
        )
        admin = request.getfixturevalue("mysql_admin")
        connect_args = request.getfixturevalue("mysql_kwargs")
    queue_pool = request.getfixturevalue(
        "mysql_queue_pool" if POOLED[kind].startswith("mysql") else "pg_queue_pool"
    )
    pooled = None if _fresh(request, queue_pool) else _ways(request, POOLED[kind])
    if pooled is None:
        queue = request.getfixturevalue(fixture)
    else:
        queue = queue_pool.take(pooled.kind, pooled.make, pooled.fingerprint)
    # Set up after the queue, so torn down before it: an open transaction
    # would hold a lock the DROP (or the pool's DELETE) waits for.
    before = pool_sql.threads()
    chosen = Backend(request.param, queue, admin, connect_args)
    try:
        yield chosen
    finally:
        pooled_sessions = [i for i in map(pool_sql.session_id, chosen.opened) if i is not None]
        chosen.close()
        if pooled is not None:
            pooled.sessions = pooled_sessions
            ended = pool_sql.threads_ended(before)
            queue_pool.give_back(
                pooled.kind,
                pooled.fingerprint,
                lambda queue: ended and pooled.empty(queue),
                pooled.drop,
            )


@pytest.fixture
def conn(backend):
    return backend.client_conn()


@pytest.fixture
def client(backend, conn):
    return backend.client(conn)


@pytest.fixture
def worker(backend):
    return backend.worker()


@pytest.fixture
def store(backend):
    return backend.store
