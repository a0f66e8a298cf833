"""The package's shape: dialects stay behind the driver seam, and imports form no cycle.

Read from the source with ``ast`` (nothing is imported), so a violation is
named by file and line:

- Outside ``nsj_queue_lib/db/`` no module imports a dialect's modules
  (``db.postgres``, ``db.mysql``, ``db.singlestore``) or a database driver
  (psycopg, psycopg2, psycopg_pool, PyMySQL, MySQLdb), nor compares
  ``db_driver``: the runtime, the server, the client and the workers ask the
  ``Driver`` (``db/driver.py``) and read its capabilities. Imports under
  ``if TYPE_CHECKING:`` and inside functions count too.
- Nor does it know a dialect otherwise (``dialect_knowledge``): no dialect's
  name compared with, keying a table or matched, no ``driver_module_name``,
  no module of ``db/`` loaded by name (nor any module by a run-time name
  but where ``LOADS_BY_NAME`` says why), no SQL text. ``PENDING_ELSEWHERE``
  lists the modules other branches are clearing (temporary).
- Inside ``db/``, the shared modules (``db/*.py``) reach a dialect only
  through ``db/driver.py``'s one door (``driver_class``, ``get_dialect``);
  PostgreSQL and the MySQL family never import each other, and only
  SingleStore builds on MySQL's modules.
- Every import between the package's modules, at module level and inside
  functions (``TYPE_CHECKING`` ones aside: they never run), resolved to the
  module it loads: the graph has no cycle.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import itertools
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "nsj_queue_lib"
SOURCE = Path(__file__).resolve().parents[2] / PACKAGE
DIALECTS = ("postgres", "mysql", "singlestore")
DRIVER_PACKAGES = ("psycopg", "psycopg2", "psycopg_pool", "pymysql", "MySQLdb")
# Outside db/, what may still name a database driver, and why (nothing, today).
ALLOWED_OUTSIDE_DB: set[tuple[str, str]] = set()
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


def imports_of(module: str) -> tuple[Import, ...]:
    """Every import statement of ``module``, each imported name made absolute."""
    return _imports(module, MODULES[module])


# Parsed once per process: the import graph alone read every module four times a run,
# and some 500 tests read one each (12 worker-s of parsing under make test).
@functools.cache
def _imports(module: str, path: Path) -> tuple[Import, ...]:
    return tuple(_parse_imports(module, path))


def _parse_imports(module: str, path: Path) -> Iterator[Import]:
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


# -- dialect knowledge stays in db/ -------------------------------------------------------------

# Modules outside db/ that still hold dialect knowledge other branches are removing right now
# (issue 38): TEMPORARY, emptied when those branches merge. Nothing may be added here.
PENDING_ELSEWHERE: set[str] = set()
# Modules outside db/ that load modules by a name known only at run time, and why none of
# those names is one of db/'s modules.
LOADS_BY_NAME = {
    # The lazy public names (_LOCATIONS): the package's own top-level modules, none in db/
    # (test_the_lazy_names_load_nothing_from_db).
    "__init__.py",
    # workers.json's "worker": the user's own module.
    "workers_json.py",
}
# How a database's name is spelled where code would test which database it is.
_DIALECT_WORDS = {"postgres", "postgresql", "mysql", "mariadb", "singlestore", "single_store"}
# A string naming one of db/'s modules, as a module loaded by name is named.
_DB_MODULE = re.compile(rf"^{PACKAGE}\.db(\.|$)")
# SQL: a statement's first keyword (upper case, as this package writes SQL) and what must
# follow it; or a subquery, or NULL tests joined by AND/OR, inside a fragment.
_SQL_STATEMENT = re.compile(
    r"^\s*\(?\s*(?:"
    r"SELECT\s.*?(\bFROM\b|\w\(|%\(|%s|\$\d|^\s*SELECT\s+\d)"
    r"|INSERT\s+INTO\s|UPDATE\s+[\w.{}]+\s+SET\s|DELETE\s+FROM\s|WITH\s+(RECURSIVE\s+)?\w+\s+AS\s"
    r"|(CREATE|ALTER|DROP)\s+(OR\s+REPLACE\s+)?(TABLE|INDEX|UNIQUE|FUNCTION|PROCEDURE|TRIGGER"
    r"|SCHEMA|VIEW|SEQUENCE|DATABASE|USER|ROLE|EXTENSION|TYPE)\b"
    r"|CALL\s+[\w.{}]+\s*\(|SET\s+(SESSION|LOCAL|GLOBAL|TRANSACTION|NAMES|@?\w+\s*(=|TO)\s)"
    r"|(BEGIN|COMMIT|ROLLBACK)(\s+(AND\s+CHAIN|TO\s+SAVEPOINT\s+\w+|WORK))?\s*;?\s*$"
    r"|(SAVEPOINT|RELEASE\s+SAVEPOINT|LISTEN|UNLISTEN|NOTIFY)\s+\"?\w+"
    r"|TRUNCATE\s+(TABLE\s+)?[\w.{}]+|KILL\s+(CONNECTION|QUERY)\s|EXPLAIN\s"
    r")",
    re.DOTALL,
)
_SQL_FRAGMENT = re.compile(
    r"\(SELECT\s[^\"']*?\sFROM\s|\bIS\s+(NOT\s+)?NULL\s+(AND|OR)\s|\bNOT\s+EXISTS\s*\(SELECT\b"
)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _text(node: ast.AST) -> str | None:
    """A string (or bytes) constant's text; an f-string's, its fields as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
        value = node.value
        return value.decode("latin-1") if isinstance(value, bytes) else value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(part) or "{}" for part in node.values)
    return None


def _is_dialect_word(node: ast.AST) -> bool:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_dialect_word(element) for element in node.elts)
    return isinstance(node, ast.Constant) and str(node.value).lower() in _DIALECT_WORDS


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _dialect_checks(node: ast.AST) -> str | None:
    """(a): a dialect's name compared with, used as a dict key or matched; driver_module_name."""
    if isinstance(node, ast.Compare) and any(
        _is_dialect_word(side) for side in (node.left, *node.comparators)
    ):
        return "compares with a dialect's name"
    if isinstance(node, ast.Dict) and any(
        key is not None and _is_dialect_word(key) for key in node.keys
    ):
        return "keys a table by a dialect's name"
    if isinstance(node, ast.MatchValue) and _is_dialect_word(node.value):
        return "matches a dialect's name"
    if isinstance(node, ast.Call) and _called(node) == "driver_module_name":
        return "asks driver_module_name which dialect it is"
    return None


def _loads_by_name(node: ast.AST) -> str | None:
    """(b): a module loaded by name: of db/, or by a name only known at run time."""
    if not (isinstance(node, ast.Call) and _called(node) in ("import_module", "__import__")):
        return None
    target = _text(node.args[0]) if node.args else None
    if target is None or "{}" in target:
        return "loads a module by a name known at run time"
    return f"loads {target} by name" if _DB_MODULE.match(target) else None


def dialect_knowledge(source: str, path: str, loads_allowed: bool = False) -> list[str]:
    """What ``source`` (a module outside db/) knows that only db/ may: (a) dialect checks,
    (b) db/'s modules loaded by name (any module loaded by a run-time name unless
    ``loads_allowed``), (c) SQL text. Each as ``path:line what``."""
    tree = ast.parse(source, path)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        why = _dialect_checks(node) or _loads_by_name(node)
        if why is not None and loads_allowed and why.endswith("known at run time"):
            why = None
        text = _text(node) if id(node) not in docstrings else None
        if text is not None and _DB_MODULE.match(text):
            why = f"names {text}"
        elif text is not None and (_SQL_STATEMENT.match(text) or _SQL_FRAGMENT.search(text)):
            why = f"holds SQL {text.strip()[:40]!r}"
        if why is not None:
            found.append(f"{path}:{node.lineno} {why}")
    return sorted(set(found))


@pytest.mark.parametrize("module", OUTSIDE_DB, ids=relative)
def test_no_module_outside_db_knows_a_dialect(module):
    """Outside db/ no module tests which database it is, loads db/'s modules by name, or holds
    SQL: it asks the Driver and its Capabilities (issue 38, "one door per dialect")."""
    path = relative(module)
    if path in PENDING_ELSEWHERE:
        pytest.skip("pending in another branch (PENDING_ELSEWHERE)")
    source = MODULES[module].read_text("utf-8")
    assert dialect_knowledge(source, path, loads_allowed=path in LOADS_BY_NAME) == []


def test_the_allowlists_name_existing_modules():
    outside = {relative(m) for m in OUTSIDE_DB}
    assert PENDING_ELSEWHERE <= outside
    assert LOADS_BY_NAME <= outside


def test_the_lazy_names_load_nothing_from_db():
    import nsj_queue_lib

    locations = vars(nsj_queue_lib)["_LOCATIONS"]
    assert locations and not [m for m in locations.values() if _DB_MODULE.match(m)]


PLANTED = {
    "a DB_DRIVER compared": ('if settings.db_driver == "POSTGRES":\n    pass\n', "compares"),
    "a dialect compared": ('def f(x):\n    return driver_name(x) != "postgres"\n', "compares"),
    "a dialect among others": ('ok = name in ("mysql", "singlestore")\n', "compares"),
    "driver_module_name": ("d = driver_module_name(settings.db_driver)\n", "driver_module_name"),
    "a table by dialect": ('PORTS = {"POSTGRES": 5432, "MYSQL": 3306}\n', "keys a table"),
    "a match": ('match name:\n    case "SINGLE_STORE":\n        pass\n', "matches"),
    "a db module by name": (
        'import importlib\nm = importlib.import_module("nsj_queue_lib.db.mysql.rows")\n',
        "loads nsj_queue_lib.db.mysql.rows",
    ),
    "a dialect module by f-string": (
        'm = importlib.import_module(f"nsj_queue_lib.db.{name}.driver")\n',
        "loads a module by a name known at run time",
    ),
    "__import__": ('m = __import__("nsj_queue_lib.db.postgres")\n', "loads nsj_queue_lib.db"),
    "a select": ('Q = "SELECT id FROM fila WHERE status = %s"\n', "holds SQL"),
    "an insert": ('Q = f"INSERT INTO {table} (id) VALUES (%s)"\n', "holds SQL"),
    "an update": ("Q = \"UPDATE fila SET status = 'falha'\"\n", "holds SQL"),
    "a delete": ('Q = "DELETE FROM fila WHERE id = %s"\n', "holds SQL"),
    "a with": ('Q = "WITH c AS (SELECT 1) SELECT * FROM c"\n', "holds SQL"),
    "ddl": ('Q = "CREATE INDEX idx ON fila (id)"\n', "holds SQL"),
    "a call": ('Q = "CALL claim_next_fila_v2(%s)"\n', "holds SQL"),
    "a transaction statement": ('Q = b"COMMIT AND CHAIN"\n', "holds SQL"),
    "a session setting": (
        'Q = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"\n',
        "holds SQL",
    ),
    "a condition": ('C = "({row}.subscriber_id IS NULL OR {handled} IS NULL)"\n', "holds SQL"),
    "a subquery": (
        'C = "NOT EXISTS (SELECT 1 FROM lim WHERE lim.processo = t.processo)"\n',
        "holds SQL",
    ),
}


@pytest.mark.parametrize("source, why", PLANTED.values(), ids=PLANTED.keys())
def test_the_dialect_check_catches_what_is_planted(tmp_path, monkeypatch, source, why):
    """The check above is not vacuous: each forbidden form, planted in a module outside db/,
    fails it, naming the line."""
    planted = tmp_path / "planted.py"
    planted.write_text(f'"""A module outside db/."""\n\nimport importlib\n\n{source}')
    monkeypatch.setitem(MODULES, f"{PACKAGE}.planted", planted)
    monkeypatch.setattr(f"{__name__}.SOURCE", tmp_path)
    with pytest.raises(AssertionError, match=rf"planted\.py:\d+ .*{re.escape(why)}"):
        test_no_module_outside_db_knows_a_dialect(f"{PACKAGE}.planted")


NOT_DIALECT_KNOWLEDGE = (
    '"""Select the worker to run: SELECT is what the claim does with the rows."""\n',
    'logger.info("select a worker; update the settings and delete the old file")\n',
    'raise ValueError("set DB_DRIVER to POSTGRES, MYSQL or SINGLE_STORE")\n',
    'print(f"--server applies to --dialect mysql only, not {name}")\n',
    'HELP = "with --dialect mysql: the server family the script is for"\n',
    'parser.add_argument("--dialect", default="postgres", choices=DIALECT_NAMES)\n',
    'message = "Begin by creating the queue; commit your transaction first"\n',
    'm = importlib.import_module("json")\n',
    'status = "NOTIFY"\n',
)


@pytest.mark.parametrize("source", NOT_DIALECT_KNOWLEDGE)
def test_the_dialect_check_lets_prose_and_choices_be(source):
    assert dialect_knowledge(source, "prose.py") == []


def test_the_sql_detector_finds_db_s_sql():
    """Run over db/ (where SQL belongs) the detector finds its statements: it sees SQL."""
    held = [
        line
        for module in MODULES
        if is_under(module, f"{PACKAGE}.db")
        for line in dialect_knowledge(MODULES[module].read_text("utf-8"), relative(module))
        if "holds SQL" in line
    ]
    assert len(held) > 40
    assert any(line.startswith("db/postgres/limits.py") for line in held)
    assert any(line.startswith("db/conditions.py") for line in held)


def test_one_function_of_the_driver_loads_a_dialect_by_name():
    """db/driver.py is the one door to the dialects: one function there loads their modules
    by name, and no other module of the package does so with db/'s."""
    loaders = []
    for module in MODULES:
        tree = ast.parse(MODULES[module].read_text("utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if any(
                isinstance(node, ast.Call) and _called(node) in ("import_module", "__import__")
                for node in ast.walk(function)
            ):
                loaders.append(f"{relative(module)}:{function.name}")
    in_db = [loader for loader in loaders if loader.startswith("db/")]
    assert in_db == ["db/driver.py:_dialect_module"]


def _reaches(graph: dict[str, dict[str, list[str]]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        for target in graph[todo.pop()]:
            if target == goal:
                return True
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return False


@pytest.mark.parametrize("include_type_checking", [False, True])
def test_the_settings_may_read_the_driver_table(include_type_checking):
    """``settings.py`` reads ``driver_capabilities`` and ``DRIVER_KEYS`` from db/driver.py
    (and db/dsn.py reads DSNs through it): db/driver.py must not lead back to the settings."""
    graph = import_graph(include_type_checking)
    assert not _reaches(graph, f"{PACKAGE}.db.driver", f"{PACKAGE}.settings")
    assert not _reaches(graph, f"{PACKAGE}.db.dsn", f"{PACKAGE}.settings")


def test_the_driver_table_loads_no_database_driver():
    """A MySQL-only install has no psycopg: the capabilities come from a table."""
    code = (
        "import sys\n"
        "from nsj_queue_lib.db.driver import DRIVER_KEYS, driver_capabilities\n"
        "assert [driver_capabilities(key).default_port for key in DRIVER_KEYS]\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{DRIVER_PACKAGES!r})\n"
        "print(loaded)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
