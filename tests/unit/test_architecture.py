"""The package's shape: dialects stay behind the driver seam, and imports form no cycle.

Read from the source with ``ast`` (nothing is imported), so a violation is
named by file and line:

- Outside ``nsj_queue_lib/db/`` no module imports a dialect's modules
  (``db.postgres``, ``db.mysql``, ``db.singlestore``) or a database driver
  (psycopg, psycopg2, psycopg_pool, PyMySQL, MySQLdb), nor compares
  ``db_driver``: the runtime, the server, the client and the workers ask the
  ``Driver`` (``db/driver.py``) and read its capabilities. Imports under
  ``if TYPE_CHECKING:`` and inside functions count too.
- Inside ``db/``, the shared modules (``db/*.py``) reach a dialect only by
  name (``make_driver``, ``get_dialect``); PostgreSQL and the MySQL family
  never import each other, and only SingleStore builds on MySQL's modules.
- Every import between the package's modules, at module level and inside
  functions (``TYPE_CHECKING`` ones aside: they never run), resolved to the
  module it loads: the graph has no cycle.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "nsj_queue_lib"
SOURCE = Path(__file__).resolve().parents[2] / PACKAGE
DIALECTS = ("postgres", "mysql", "singlestore")
DRIVER_PACKAGES = ("psycopg", "psycopg2", "psycopg_pool", "pymysql", "MySQLdb")
# Outside db/, what may still name a database driver, and why.
ALLOWED_OUTSIDE_DB = {
    # Settings.postgres_conninfo() builds the libpq conninfo string with psycopg's helper.
    ("settings.py", "psycopg.conninfo"),
}
# Inside db/<dialect>/, the other dialects' packages a dialect may import.
DIALECT_BASES = {"postgres": set(), "mysql": set(), "singlestore": {"mysql"}}


@dataclasses.dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the imported name, dotted (absolute)
    line: int
    type_checking: bool  # under ``if TYPE_CHECKING:``
    in_function: bool


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(SOURCE.rglob("*.py"))}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).split(".")[-1] == "TYPE_CHECKING":
            for child in node.body:
                found.update(id(sub) for sub in ast.walk(child))
    return found


def _function_nodes(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            found.update(id(sub) for sub in ast.walk(node) if sub is not node)
    return found


def imports_of(module: str) -> Iterator[Import]:
    """Every import statement of ``module``, each imported name made absolute."""
    path = MODULES[module]
    tree = ast.parse(path.read_text("utf-8"), str(path))
    type_checking, in_function = _type_checking_nodes(tree), _function_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        flags = (id(node) in type_checking, id(node) in in_function)
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno, *flags)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for alias in node.names:
                # ``from pkg import name``: a submodule when one is called so.
                full = f"{base}.{alias.name}"
                yield Import(module, full if full in MODULES else base, node.lineno, *flags)


def loaded_module(target: str) -> str | None:
    """The package's module an import loads (its longest known prefix), or None."""
    name = target
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def relative(module: str) -> str:
    return str(MODULES[module].relative_to(SOURCE))


def is_under(target: str, prefix: str) -> bool:
    return target == prefix or target.startswith(prefix + ".")


# -- dialects behind the seam -------------------------------------------------------------


OUTSIDE_DB = sorted(m for m in MODULES if not is_under(m, f"{PACKAGE}.db"))


def test_the_modules_outside_db_are_the_ones_the_seam_is_for():
    names = {relative(m) for m in OUTSIDE_DB}
    assert {"queue_client.py", "worker_base.py", "runtime/worker_runtime.py"} <= names
    for folder in ("runtime", "server", "client", "notify"):
        assert any(name.startswith(f"{folder}/") for name in names), folder


@pytest.mark.parametrize("module", OUTSIDE_DB, ids=relative)
def test_no_module_outside_db_imports_a_dialect_or_a_database_driver(module):
    forbidden = [f"{PACKAGE}.db.{dialect}" for dialect in DIALECTS]
    found = []
    for imp in imports_of(module):
        if (relative(module), imp.target) in ALLOWED_OUTSIDE_DB:
            continue
        if any(is_under(imp.target, prefix) for prefix in (*forbidden, *DRIVER_PACKAGES)):
            found.append(f"{relative(module)}:{imp.line} imports {imp.target}")
    assert found == []


_DB_DRIVER_TEST = re.compile(r"db_driver\s*(==|!=|\bin\b|\bnot in\b)|(==|!=)\s*\S*db_driver\b")


@pytest.mark.parametrize("module", OUTSIDE_DB, ids=relative)
def test_no_module_outside_db_tests_which_database_it_is(module):
    """The capabilities say what a database offers; ``settings.db_driver == ...`` would not."""
    tree = ast.parse(MODULES[module].read_text("utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(
                (isinstance(side, ast.Attribute) and side.attr == "db_driver")
                or (isinstance(side, ast.Name) and side.id == "db_driver")
                for side in sides
            ):
                found.append(f"{relative(module)}:{node.lineno} {ast.unparse(node)}")
    for number, line in enumerate(MODULES[module].read_text("utf-8").splitlines(), 1):
        if _DB_DRIVER_TEST.search(line.split("#")[0]) and not any(
            f":{number} " in f for f in found
        ):
            found.append(f"{relative(module)}:{number} {line.strip()}")
    assert found == []


def test_the_db_driver_check_catches_a_comparison(tmp_path, monkeypatch):
    """The check above is not vacuous: it names a comparison of db_driver."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(s):\n    return s.db_driver == 'MYSQL'\n")
    monkeypatch.setitem(MODULES, f"{PACKAGE}.bad", bad)
    monkeypatch.setattr(f"{__name__}.SOURCE", tmp_path)
    with pytest.raises(AssertionError, match=r"bad\.py:2 s\.db_driver == 'MYSQL'"):
        test_no_module_outside_db_tests_which_database_it_is(f"{PACKAGE}.bad")


SHARED_DB = sorted(m for m in MODULES if m.count(".") == 2 and is_under(m, f"{PACKAGE}.db"))


@pytest.mark.parametrize("module", SHARED_DB, ids=relative)
def test_the_shared_db_modules_reach_the_dialects_by_name_only(module):
    found = [
        f"{relative(module)}:{imp.line} imports {imp.target}"
        for imp in imports_of(module)
        if any(is_under(imp.target, f"{PACKAGE}.db.{dialect}") for dialect in DIALECTS)
        or any(is_under(imp.target, driver) for driver in DRIVER_PACKAGES)
    ]
    assert found == []


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_dialect_imports_no_other_dialect_but_its_base(dialect):
    own = f"{PACKAGE}.db.{dialect}"
    allowed = {own} | {f"{PACKAGE}.db.{base}" for base in DIALECT_BASES[dialect]}
    drivers = {"postgres": ("pymysql", "MySQLdb"), "mysql": ("psycopg", "psycopg2", "psycopg_pool")}
    found = []
    for module in (m for m in MODULES if is_under(m, own)):
        for imp in imports_of(module):
            other = [
                prefix
                for prefix in (f"{PACKAGE}.db.{d}" for d in DIALECTS)
                if is_under(imp.target, prefix) and prefix not in allowed
            ]
            wrong_driver = [
                d
                for d in drivers.get("mysql" if dialect == "singlestore" else dialect, ())
                if is_under(imp.target, d)
            ]
            if other or wrong_driver:
                found.append(f"{relative(module)}:{imp.line} imports {imp.target}")
    assert found == []


# -- no import cycles ---------------------------------------------------------------------------


def import_graph(include_type_checking: bool = False) -> dict[str, dict[str, list[str]]]:
    """{module: {imported module: ["file:line", ...]}} between the package's modules."""
    graph: dict[str, dict[str, list[str]]] = {module: {} for module in MODULES}
    for module in MODULES:
        for imp in imports_of(module):
            if imp.type_checking and not include_type_checking:
                continue
            target = loaded_module(imp.target) if is_under(imp.target, PACKAGE) else None
            if target is None or target == module:
                continue
            graph[module].setdefault(target, []).append(f"{relative(module)}:{imp.line}")
    return graph


def find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def describe(cycle: list[str], graph: dict[str, dict[str, list[str]]]) -> str:
    steps = [f"{a} -> {b} ({', '.join(graph[a][b])})" for a, b in itertools.pairwise(cycle)]
    return "import cycle:\n  " + "\n  ".join(steps)


def test_the_import_graph_sees_the_imports():
    graph = import_graph()
    # A module-level import, a relative-free function-level one and a `from pkg import module`.
    assert f"{PACKAGE}.db.driver" in graph[f"{PACKAGE}.runtime.worker_runtime"]
    assert f"{PACKAGE}.db.threaded" in graph[f"{PACKAGE}.db.driver"]  # in a method
    assert sum(len(targets) for targets in graph.values()) > 100


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    cycle = find_cycle(graph)
    assert cycle is None, describe(cycle, graph)


def test_the_package_has_no_import_cycle_even_in_type_annotations():
    """``TYPE_CHECKING`` imports never run, but mypy follows them: no cycle there either."""
    graph = import_graph(include_type_checking=True)
    cycle = find_cycle(graph)
    assert cycle is None, describe(cycle, graph)


def test_find_cycle_finds_one():
    graph = {"a": {"b": ["a.py:1"]}, "b": {"c": ["b.py:3"]}, "c": {"a": ["c.py:9"]}, "d": {}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert "a -> b (a.py:1)" in describe(["a", "b", "c", "a"], graph)
    assert find_cycle({"a": {"b": []}, "b": {}}) is None
