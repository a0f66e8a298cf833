"""The library's shape, read from its source with ``ast`` (issue 38): small modules, short
functions, and classes that talk through each other's public members only.

- no module of the library over MAX_MODULE_LINES lines, no function over MAX_FUNCTION_LINES;
- in the runtime and the database wing, no ``x._name`` where ``x`` is not ``self`` or
  ``cls`` (another object's private member) and no ``from m import _name`` (another
  module's private name): what one part needs of another is part of its interface.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2] / "nsj_queue_lib"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
# Where another object's private members are off limits.
SEAMED = ("runtime", "db")
# Private names of the standard library a module may still use, and why.
STANDARD_PRIVATES = {"_exit"}  # os._exit: ends a process whose handler ignored the grace period


def modules() -> list[Path]:
    return sorted(SOURCE.rglob("*.py"))


def long_functions(tree: ast.AST) -> list[tuple[str, int]]:
    return [
        (node.name, node.end_lineno - node.lineno + 1)  # type: ignore[operator]
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES  # type: ignore[operator]
    ]


def foreign_privates(tree: ast.AST) -> list[tuple[int, str]]:
    """``x._name`` on another object, and ``from m import _name``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and ast.unparse(owner.func) == "super":
                continue
            if node.attr in STANDARD_PRIVATES:
                continue
            found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, f"import {a.name}") for a in node.names if _private(a.name)]
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_is_over_the_limit():
    sizes = {str(p.relative_to(SOURCE)): len(p.read_text().splitlines()) for p in modules()}
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_no_function_is_over_the_limit():
    found = {
        str(p.relative_to(SOURCE)): long_functions(ast.parse(p.read_text())) for p in modules()
    }
    assert {name: f for name, f in found.items() if f} == {}


@pytest.mark.parametrize("wing", SEAMED)
def test_no_part_uses_another_parts_private_members(wing):
    found = {
        str(p.relative_to(SOURCE)): foreign_privates(ast.parse(p.read_text()))
        for p in sorted((SOURCE / wing).rglob("*.py"))
    }
    assert {name: f for name, f in found.items() if f} == {}


def test_the_checks_see_what_they_forbid():
    planted = ast.parse(
        "from m import _hidden\n"
        "def f(executor):\n"
        "    executor._discard(None)\n"
        "    self._fine()\n"
        "    super()._fine()\n" + "    pass\n" * MAX_FUNCTION_LINES
    )
    assert foreign_privates(planted) == [(1, "import _hidden"), (3, "executor._discard")]
    assert long_functions(planted) == [("f", MAX_FUNCTION_LINES + 4)]
