"""The list of ``make mutants`` (scripts/mutants.py) still matches the code.

Running the mutants takes minutes and is not part of the test suite, but a
mutant whose original text moved or changed would silently stop planting its
bug; this check costs a fraction of a second, so it runs with every test run.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "mutants.py"


@pytest.fixture(scope="module")
def mutants():
    spec = importlib.util.spec_from_file_location("nsjq_mutants", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_every_mutant_plants_its_bug_in_exactly_one_place(mutants):
    assert mutants.problems(mutants.MUTANTS) == []


def test_a_mutant_whose_text_moved_is_reported(mutants, tmp_path):
    target = tmp_path / "code.py"
    target.write_text("x = 1\nx = 1\n")
    (tmp_path / "test_code.py").write_text("")
    twice = mutants.Mutant(
        "twice", "code.py", "x = 1", "x = 2", ("test_code.py",), ("postgres",), ""
    )
    gone = mutants.Mutant("gone", "code.py", "y = 1", "y = 2", ("test_code.py",), ("mysql",), "")
    assert mutants.problems([twice, gone], root=tmp_path) == [
        "twice: its original text occurs 2 times in code.py, not once",
        "gone: its original text occurs 0 times in code.py, not once",
    ]


def test_a_mutant_whose_test_was_renamed_is_reported(mutants, tmp_path):
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "test_code.py").write_text("def test_x():\n    pass\n")
    kept = mutants.Mutant(
        "kept", "code.py", "x = 1", "x = 2", ("test_code.py::test_x[a-b]",), ("postgres",), ""
    )
    renamed = mutants.Mutant(
        "renamed", "code.py", "x = 1", "x = 2", ("test_code.py::test_y",), ("postgres",), ""
    )
    assert mutants.problems([kept, renamed], root=tmp_path) == [
        "renamed: test_code.py defines no test_y",
    ]
