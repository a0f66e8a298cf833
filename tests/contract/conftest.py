"""Fixtures of the contract suite: ``backend``, parametrized over every backend.

See ``tests/contract/backends.py`` for the backends and what a ``Backend`` can do.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.contract.backends import BACKENDS, Backend
from tests.helpers import queue_pool


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def pytest_collection_modifyitems(config, items):
    """Tests marked with ``known_bug`` are strict xfail on the backends named there."""
    for item in items:
        bugs = getattr(getattr(item, "function", None), "_contract_bugs", None)
        callspec = getattr(item, "callspec", None)
        if bugs and callspec is not None and callspec.params.get("backend") in bugs:
            item.add_marker(pytest.mark.xfail(strict=True, reason=bugs[callspec.params["backend"]]))


def _keep_queues():
    """{kind: (queue name, its fingerprint when made, DSN)}: this xdist worker's queue of each
    backend on one server, emptied between tests (tests/helpers/queue_pool.py)."""
    kept: dict[str, tuple[str, str, str]] = {}
    yield kept
    for kind, (name, _, dsn) in kept.items():
        directory = Path(tempfile.mkdtemp(prefix="nsjq-contract-"))
        try:
            Backend(kind, dsn, directory, name=name).close()
        finally:
            shutil.rmtree(directory, ignore_errors=True)


# One pool per server, each set up after (so torn down before) its server's fixture: the
# embedded PostgreSQL of a fresh clone stops when pg_dsn is torn down, and its queues
# must be dropped before that.
@pytest.fixture(scope="session")
def pg_contract_pool(pg_dsn):
    yield from _keep_queues()


@pytest.fixture(scope="session")
def mysql_contract_pool(mysql_dsn):
    yield from _keep_queues()


@pytest.fixture(params=BACKENDS)
def backend(request):
    kind = request.param
    server = "pg" if kind.startswith("postgres") else "mysql"
    dsn = request.getfixturevalue(f"{server}_dsn")
    contract_pool = request.getfixturevalue(f"{server}_contract_pool")
    directory = Path(tempfile.mkdtemp(prefix="nsjq-contract-"))
    pooled = not (
        request.node.get_closest_marker("fresh_queue")
        or os.environ.get("NSJQ_FRESH_QUEUES", "") not in ("", "0")
    )
    kept = contract_pool.pop(kind, None) if pooled else None
    before = queue_pool.threads()
    b = Backend(kind, dsn, directory, **({"name": kept[0]} if kept else {}))
    made = kept[1] if kept else None
    reusable = False
    try:
        if made is None:
            b.create()
            made = b.fingerprint() if pooled else None
        if b.via_server:
            b.start_server()
        yield b
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            if b._processes:
                print(b.process_logs())
            if b.server is not None:
                print(f"--- server log ---\n{b.server.log_text()[-3000:]}")
    finally:
        try:
            b.close(drop=False)
            reusable = (
                pooled
                and queue_pool.threads_ended(before)
                and b.fingerprint() == made
                and b.empty()
            )
        finally:
            if reusable:
                contract_pool[kind] = (b.name, made, dsn)
            else:
                b.drop()
            b.admin.close()
            shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def second(backend):
    """A second queue on the backend's database."""
    other = Backend(backend.kind, backend.dsn, backend.directory)
    other.create()
    try:
        yield other
    finally:
        other.close()
