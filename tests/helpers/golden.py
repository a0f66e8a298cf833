"""``python -m nsj_queue_lib.db_gen`` as a user runs it, and its output against the golden files.

Used by the db_gen tests and by ``tests/golden/regenerate.py``, which rewrites
the golden files from the same command.
"""

from __future__ import annotations

import subprocess

from tests.helpers.processes import ROOT, run_python

GOLDEN = ROOT / "tests" / "golden"
REGENERATE = "python tests/golden/regenerate.py"


def db_gen(*args: str) -> subprocess.CompletedProcess:
    """``python -m nsj_queue_lib.db_gen <args>`` in the repository root, its output as text."""
    return run_python("-m", "nsj_queue_lib.db_gen", *args)


def assert_matches_golden(golden: str, args: list[str]) -> None:
    """db_gen ``args`` exits 0, says nothing on stderr and prints ``tests/golden/<golden>``."""
    result = db_gen(*args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    expected = (GOLDEN / golden).read_text("utf-8")
    assert result.stdout == expected, (
        f"tests/golden/{golden} is stale: run {REGENERATE} and review the diff"
    )
