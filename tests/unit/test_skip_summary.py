"""The terminal summary's "skipped, by cause" section (tests/helpers/skip_summary.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import databases
from tests.helpers.pg_plans import AUTO_EXPLAIN_MISSING
from tests.helpers.skip_summary import cause_of, summary_lines

ROOT = Path(__file__).resolve().parents[2]


def _reason(raises, *args) -> str:
    with pytest.raises(Exception) as raised:
        raises(*args)
    return str(raised.value)


def test_the_reasons_the_helpers_give_fall_under_their_cause(monkeypatch):
    mysql = _reason(databases.resolve_mysql, {})
    assert cause_of(mysql).want == "MariaDB/MySQL"
    assert "TEST_MYSQL_DSN=" in cause_of(mysql).enable

    from tests.helpers import pgbouncer

    monkeypatch.setattr(pgbouncer.shutil, "which", lambda name: None)
    bouncer = _reason(pgbouncer.pgbouncer_binary)
    assert cause_of(bouncer).want == "PgBouncer"

    explain = f"{AUTO_EXPLAIN_MISSING} (...); the embedded PostgreSQL (pgserver) has none"
    assert cause_of(explain).want.startswith("auto_explain")
    embedded = "the embedded PostgreSQL (pgserver) did not start: initdb failed"
    assert cause_of(embedded).want.startswith("PostgreSQL")
    assert cause_of("no chromium at /usr/bin/chromium (apt-get install chromium)").enable
    assert cause_of("SingleStore queues have no claim routine") is None


def test_the_lines_count_each_cause_and_list_other_reasons_as_they_are():
    reasons = ["TEST_MYSQL_DSN is not set"] * 12 + ["pgbouncer is not installed"] * 3
    reasons += ["SingleStore queues have no claim routine"] * 2
    assert summary_lines(reasons) == [
        "12 skipped for want of MariaDB/MySQL: "
        "TEST_MYSQL_DSN='mysql://root:@127.0.0.1:3306/test' (a reachable MariaDB 10.6+/MySQL 8)",
        " 3 skipped for want of PgBouncer: apt-get install pgbouncer",
        " 2 skipped because SingleStore queues have no claim routine",
    ]
    assert summary_lines([]) == []
    many = [f"reason {i}" for i in range(12)]
    assert summary_lines(many)[-1] == (
        "4 skipped for other reasons (make test PYTEST_ARGS='-rs' lists them)"
    )


def test_a_run_on_xdist_workers_ends_with_the_section(tmp_path):
    (tmp_path / "test_skips.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.parametrize("i", range(3))
            def test_mysql(i):
                pytest.skip("TEST_MYSQL_DSN is not set (mysql://...); MariaDB/MySQL tests skipped")

            def test_browser():
                pytest.skip("no chromium at /usr/bin/chromium (apt-get install chromium)")

            def test_other():
                pytest.skip("this machine has no non-loopback IPv6 address")

            def test_runs():
                pass
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "tests.helpers.skip_summary"]
        + ["-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    section = out[out.index("skipped, by cause") :]
    assert "3 skipped for want of MariaDB/MySQL: TEST_MYSQL_DSN=" in section, out
    assert "1 skipped for want of a browser (chromium): apt-get install chromium" in section
    assert "1 skipped because this machine has no non-loopback IPv6 address" in section
    assert "1 passed, 5 skipped" in section
