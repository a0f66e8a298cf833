"""Fixtures of the contract suite: ``backend``, parametrized over every backend.

See ``tests/contract/backends.py`` for the backends and what a ``Backend`` can do.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.contract.backends import BACKENDS, Backend


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


@pytest.fixture(params=BACKENDS)
def backend(request):
    kind = request.param
    dsn = request.getfixturevalue("pg_dsn" if kind.startswith("postgres") else "mysql_dsn")
    directory = Path(tempfile.mkdtemp(prefix="nsjq-contract-"))
    b = Backend(kind, dsn, directory)
    try:
        b.create()
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
        b.close()
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
