"""Fixtures of the store conformance suite: every test runs on each backend it names.

- ``backend``: a fresh queue and its store (``backends.Backend``); by default
  on the stores with session locks (``postgres``, ``mysql``); a module or a
  test names others with ``backends.on(...)`` (the test's choice wins);
- ``conn`` / ``client``: a caller's connection (never autocommit) and a
  ``QueueClient`` on it;
- ``worker``: an executor's connection, as the runtime opens it;
- ``store``: the backend's store, bound to the queue.
"""

from __future__ import annotations

import pytest

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


@pytest.fixture
def backend(request):
    if request.param in ("postgres", "psycopg2", "partitioned"):
        fixture = "pg_partitioned_queue" if request.param == "partitioned" else "pg_queue"
        queue = request.getfixturevalue(fixture)
        admin = request.getfixturevalue("pg_admin")
        connect_args = request.getfixturevalue("pg_dsn")
    else:
        fixture = (
            "mysql_partitioned_queue" if request.param == "mysql-partitioned" else "mysql_queue"
        )
        queue = request.getfixturevalue(fixture)
        admin = request.getfixturevalue("mysql_admin")
        connect_args = request.getfixturevalue("mysql_kwargs")
    # Set up after the queue, so torn down before it: an open transaction
    # would hold a lock the DROP waits for.
    chosen = Backend(request.param, queue, admin, connect_args)
    try:
        yield chosen
    finally:
        chosen.close()


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
