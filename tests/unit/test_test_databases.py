"""The test infrastructure itself: DSN parsing, and skip-or-fail when a database is missing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nsj_queue_lib.db_gen import render
from tests.helpers.databases import (
    DatabaseUnavailable,
    ci_enabled,
    days_ahead,
    mysql_connect_kwargs,
    redact,
    resolve_mysql,
)

ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    """A local TCP port nothing listens on (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_fixtures_days_ahead_reach_both_dialects_ddl_and_only_meanwhile():
    """The partitioned queue fixtures' fewer days ahead replace two module values: a
    refactoring that makes them miss must fail here, not make the suite slow unseen."""

    def scripts() -> tuple[str, str]:
        return (
            render("public", "q", layout="partitioned"),
            render("test", "q", "mysql", layout="partitioned"),
        )

    with days_ahead(2):
        pg, mysql = scripts()
    assert "FOR day IN today - 1 .. today + 2 LOOP" in pg
    assert "WHERE day + 7 <= @nsjq_today + 2\n" in mysql
    pg, mysql = scripts()
    assert "FOR day IN today - 1 .. today + 14 LOOP" in pg
    assert "WHERE day + 7 <= @nsjq_today + 14\n" in mysql


def test_mysql_dsn_is_parsed_into_pymysql_arguments():
    assert mysql_connect_kwargs("mysql://root:@127.0.0.1:3306/test") == {
        "host": "127.0.0.1",
        "port": 3306,
        "user": "root",
        "password": "",
        "database": "test",
        "charset": "utf8mb4",
    }
    kwargs = mysql_connect_kwargs("mysql://app%40x:p%2Fw%3A%40d@db.local/erp?charset=utf8")
    assert kwargs["user"] == "app@x"
    assert kwargs["password"] == "p/w:@d"
    assert kwargs["host"] == "db.local"
    assert kwargs["port"] == 3306
    assert kwargs["database"] == "erp"
    assert kwargs["charset"] == "utf8"
    assert mysql_connect_kwargs("mariadb://u:p@h:3307/d")["port"] == 3307


@pytest.mark.parametrize(
    "dsn",
    [
        "postgres://u@h/d",
        "mysql://u@h:3306",
        "mysql://u@h:3306/",
        "mysql://u@h:port/d",
        "mysql://u@h/d/e",
        "mysql://u@h/d?sslmode=x",
    ],
)
def test_malformed_mysql_dsn(dsn):
    with pytest.raises(ValueError):
        mysql_connect_kwargs(dsn)


def test_redact_hides_passwords():
    assert "secret" not in redact("mysql://root:secret@127.0.0.1:3306/test")
    assert "secret" not in redact("host=h user=u password=secret dbname=d")
    assert redact("host=h user=u dbname=d") == "host=h user=u dbname=d"


@pytest.mark.parametrize(
    "value, expected", [("true", True), ("TRUE", True), ("1", True), ("", False), ("false", False)]
)
def test_ci_flag(value, expected):
    assert ci_enabled({"CI": value}) is expected
    assert ci_enabled({}) is False


def test_resolve_mysql_unset_and_unreachable():
    with pytest.raises(DatabaseUnavailable, match="TEST_MYSQL_DSN is not set"):
        resolve_mysql({})
    with pytest.raises(DatabaseUnavailable, match="cannot connect"):
        resolve_mysql({"TEST_MYSQL_DSN": f"mysql://root:pw@127.0.0.1:{closed_port()}/test"})


PROBE = textwrap.dedent(
    """
    def test_needs_mysql(mysql_dsn):
        assert mysql_dsn

    def test_needs_pg(pg_dsn):
        assert pg_dsn
    """
)


def run_probe(tmp_path, test: str, **environ: str) -> subprocess.CompletedProcess:
    """Run one probe test in a child pytest that loads our conftest as a plugin."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CI", "TEST_MYSQL_DSN", "TEST_PG_DSN", "PYTEST_ADDOPTS")
    }
    env.update(environ)
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-c",
            str(tmp_path / "pytest.ini"),
            "--rootdir",
            str(tmp_path),
            "-rsf",
            "-q",
            f"{tmp_path / 'test_probe.py'}::{test}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_missing_mysql_skips_with_a_visible_reason(tmp_path):
    result = run_probe(tmp_path, "test_needs_mysql")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout
    assert "TEST_MYSQL_DSN is not set" in result.stdout


def test_missing_mysql_fails_under_ci(tmp_path):
    result = run_probe(tmp_path, "test_needs_mysql", CI="true")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 error" in result.stdout or "1 failed" in result.stdout
    assert "CI=true" in result.stdout


def test_unreachable_mysql_skips_outside_ci_and_fails_under_ci(tmp_path):
    dsn = f"mysql://root:pw@127.0.0.1:{closed_port()}/test"
    skipped = run_probe(tmp_path, "test_needs_mysql", TEST_MYSQL_DSN=dsn)
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout
    failed = run_probe(tmp_path, "test_needs_mysql", TEST_MYSQL_DSN=dsn, CI="true")
    assert failed.returncode == 1, failed.stdout
    assert "cannot connect" in failed.stdout
    assert ":pw@" not in failed.stdout


def test_unreachable_pg_dsn_fails(tmp_path):
    dsn = f"host=127.0.0.1 port={closed_port()} user=postgres dbname=test"
    for extra in ({}, {"CI": "true"}):
        result = run_probe(tmp_path, "test_needs_pg", TEST_PG_DSN=dsn, **extra)
        assert result.returncode == 1, result.stdout
        assert "cannot connect to TEST_PG_DSN" in result.stdout
