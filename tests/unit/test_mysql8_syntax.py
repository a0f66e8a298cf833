"""No MariaDB-only syntax where MySQL 8.0 is the target (issue 37, item 3).

No MySQL 8 server runs on the machines these tests run on, so this reads the
SQL instead: the DDL of ``db_gen --dialect mysql --server mysql`` (create,
upgrade, drop-old-routines, the statements the upgrade runs through PREPARE
included) and the SQL the worker and the client send to a MySQL server (the
named queries of db/mysql/*.sql, the MySQL store's Python-built statements).
Each is scanned for constructs MySQL 8.0 lacks or has deprecated for
removal. The one allowed exception is named: the ``returning`` step of the
insert queries, which the store sends to MariaDB only (checked here with a
fake MySQL 8 connection). The MariaDB variant (the default) is checked to
hold what it is allowed to, so that the scan is known to find them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from nsj_queue_lib.db.mysql.dialect import (
    SERVERS,
    claim_procedure_version,
    claim_procedure_versions,
    for_server,
    split_script,
)
from nsj_queue_lib.db.sql_files import load_queries
from nsj_queue_lib.db_gen import render

ROOT = Path(__file__).resolve().parents[2]
MYSQL_DIR = ROOT / "nsj_queue_lib" / "db" / "mysql"

# (what, pattern): constructs MariaDB has and MySQL 8.0 lacks, or deprecates for removal.
MARIADB_ONLY = [
    ("EXECUTE IMMEDIATE (MariaDB only)", r"\bEXECUTE\s+IMMEDIATE\b"),
    (
        "':=' assignment inside an expression (deprecated by MySQL 8.0.13, removal announced)",
        r":=",
    ),
    ("RETURNING (MariaDB's INSERT/DELETE/REPLACE ... RETURNING)", r"\bRETURNING\b"),
    (
        "sequences (MariaDB's CREATE SEQUENCE / NEXTVAL / NEXT VALUE FOR)",
        r"\bCREATE\s+SEQUENCE\b|\bNEXTVAL\s*\(|\bLASTVAL\s*\(|\bSETVAL\s*\(|\b(NEXT|PREVIOUS)\s+VALUE\s+FOR\b",
    ),
    (
        "CREATE OR REPLACE of anything but a view (MariaDB only)",
        r"\bCREATE\s+OR\s+REPLACE\s+(?!VIEW\b)(\w+)",
    ),
    (
        "IF [NOT] EXISTS on a column, index or key in ALTER TABLE / CREATE INDEX (MariaDB only)",
        r"\b(ADD|DROP|MODIFY|CHANGE)\s+(COLUMN\s+|UNIQUE\s+|INDEX\s+|KEY\s+)*IF\s+(NOT\s+)?EXISTS\b"
        r"|\bCREATE\s+(UNIQUE\s+)?INDEX\s+IF\s+NOT\s+EXISTS\b"
        r"|\bDROP\s+INDEX\s+IF\s+EXISTS\b",
    ),
    (
        "CREATE PROCEDURE/FUNCTION/TRIGGER IF NOT EXISTS (MySQL 8.0.29+ only)",
        r"\bCREATE\s+(PROCEDURE|FUNCTION|TRIGGER)\s+IF\s+NOT\s+EXISTS\b",
    ),
    (
        "JSON functions MySQL 8.0 lacks",
        r"\bJSON_(DETAILED|PRETTY_PRINT|LOOSE|COMPACT|EXISTS|QUERY|VALUE|NORMALIZE|EQUALS"
        r"|ARRAY_INTERSECT|OBJECT_FILTER_KEYS|OBJECT_TO_ARRAY|KEY_VALUE)\s*\(",
    ),
    ("ordered JSON_ARRAYAGG (MariaDB only)", r"\bJSON_ARRAYAGG\s*\([^)]*\bORDER\s+BY\b"),
    (
        "VALUES(column) in ON DUPLICATE KEY UPDATE (deprecated by MySQL 8.0.20)",
        r"\bVALUES\s*\(\s*\w+\s*\)",
    ),
    ("WAIT n locking clauses (MariaDB only)", r"\bWAIT\s+\d+"),
    ("LIMIT ROWS EXAMINED (MariaDB only)", r"\bROWS\s+EXAMINED\b"),
    ("SET STATEMENT ... FOR (MariaDB only)", r"\bSET\s+STATEMENT\b"),
    ("system-versioned tables (MariaDB only)", r"\bSYSTEM_TIME\b|\bSYSTEM\s+VERSIONING\b"),
    ("MariaDB-only executable comments", r"/\*M!"),
    ("INTERSECT / EXCEPT (MySQL 8.0.31+ only)", r"\bINTERSECT\b|\bEXCEPT\b"),
]

# Named query steps sent to MariaDB only, with the code that makes sure of it.
MARIADB_ONLY_STEPS = {
    "returning",  # family_store._insert_rows: `if info.flavour == MARIADB`
    # mysql/statistics.py: the step named after the server's flavour (modified_<flavour>,
    # analyze's <flavour>).
    "mariadb",
    "modified_mariadb",
    "mariadb_partition",
}

_STEP_LINE = re.compile(r"^-- step: ([a-z_]+)\s*$", re.MULTILINE)


def code_of(sql: str) -> str:
    """SQL without its comments (line comments, and /* */ except executable ones)."""
    sql = re.sub(r"/\*(?![!M]).*?\*/", " ", sql, flags=re.S)
    return "\n".join(re.sub(r"(^|\s)--(\s.*)?$", "", line) for line in sql.splitlines())


def findings(sql: str) -> list[str]:
    code = code_of(sql)
    found = []
    for what, pattern in MARIADB_ONLY:
        for match in re.finditer(pattern, code, flags=re.I):
            line = code[: match.start()].count("\n") + 1
            text = code.splitlines()[line - 1].strip()
            found.append(f"{what}: line {line}: {text[:120]}")
    return found


def _prepared_texts(sql: str) -> list[str]:
    """The statements a script builds as string literals and runs with PREPARE
    (upgrade_step.sql): each literal, unescaped, to be scanned as SQL too."""
    literals = re.findall(r"'((?:[^'\\]|''|\\.)*)'", code_of(sql))
    return [lit.replace("''", "'") for lit in literals if re.match(r"\s*[A-Z]{2,}\s", lit)]


def mysql_scripts() -> dict[str, str]:
    return {
        "create": render("public", "fila_teste", "mysql", server="mysql"),
        "upgrade": render("public", "fila_teste", "mysql", upgrade=True, server="mysql"),
        "drop-old-routines": render(
            "public", "fila_teste", "mysql", drop_old_routines=True, server="mysql"
        ),
        "create-partitioned": render(
            "public", "fila_teste", "mysql", server="mysql", layout="partitioned"
        ),
        "upgrade-partitioned": render(
            "public", "fila_teste", "mysql", upgrade=True, server="mysql", layout="partitioned"
        ),
    }


def scan_script(script: str) -> list[str]:
    found = []
    for statement in split_script(script):
        found += findings(statement)
        for text in _prepared_texts(statement):
            found += [f"(inside PREPARE) {f}" for f in findings(text)]
    return found


@pytest.mark.parametrize(
    "kind",
    ["create", "upgrade", "drop-old-routines", "create-partitioned", "upgrade-partitioned"],
)
def test_the_mysql_variant_ddl_has_no_mariadb_only_syntax(kind):
    found = scan_script(mysql_scripts()[kind])
    assert found == [], "\n".join(found)


def test_the_command_line_prints_the_mysql_variant():
    from tests.helpers.golden import db_gen

    result = db_gen("public", "fila_teste", "--dialect", "mysql", "--server", "mysql")
    assert result.returncode == 0, result.stderr
    assert result.stdout == mysql_scripts()["create"]
    refused = db_gen("public", "fila_teste", "--server", "mysql")  # PostgreSQL: no such choice
    assert refused.returncode == 2 and "--dialect mysql" in refused.stderr


def test_the_scan_finds_what_the_mariadb_variant_uses():
    """The default (MariaDB) rendering keeps EXECUTE IMMEDIATE and the locking read's
    assignments: the scan must see them, or it would pass anything."""
    found = scan_script(render("public", "fila_teste", "mysql"))
    assert sum("EXECUTE IMMEDIATE" in f for f in found) == 2, found
    assert sum("':='" in f for f in found) == 7, found
    # ... and the scan looks inside the statements the upgrade runs through PREPARE.
    assert findings("ALTER TABLE t ADD COLUMN IF NOT EXISTS c int")
    assert scan_script("SET @nsjq_ddl = 'ALTER TABLE t ADD INDEX IF NOT EXISTS i (c)';")
    assert findings("INSERT INTO t (a) VALUES (1) RETURNING id")
    assert findings("CREATE OR REPLACE PROCEDURE p() BEGIN END")
    assert findings("SELECT NEXTVAL(s)")
    assert findings("SELECT JSON_DETAILED(x)")
    assert not findings("CREATE OR REPLACE VIEW v AS SELECT 1")
    assert not findings("SET @a = 1 -- not := in a comment")


def test_the_variants_differ_only_where_mariadb_has_its_own_syntax():
    template = (MYSQL_DIR / "claim_procedure.sql").read_text("utf-8")
    mariadb, mysql = (for_server(template, server) for server in SERVERS)
    assert "EXECUTE IMMEDIATE" in mariadb and ":=" in mariadb
    assert "PREPARE nsjq_claim_statement" in mysql and "CURSOR FOR" in mysql
    assert "-- server:" not in mariadb + mysql
    # Each variant has its own procedure version; workers accept both.
    assert claim_procedure_versions() == (
        claim_procedure_version("mariadb"),
        claim_procedure_version("mysql"),
    )
    assert len(set(claim_procedure_versions())) == 2
    with pytest.raises(ValueError, match="never ended"):
        for_server("-- server: mysql\nx\n", "mysql")
    with pytest.raises(ValueError, match="where"):
        for_server("-- server: end\n", "mysql")


def _query_steps(filename: str) -> dict[str, str]:
    """{query/step: sql} of a named-query file as the MySQL stores load it (a
    ``-- base:`` file included)."""
    steps = {}
    for name, body in load_queries("mysql", filename).items():
        parts = _STEP_LINE.split(body)
        if len(parts) == 1:
            steps[name] = body
        for step, sql in zip(parts[1::2], parts[2::2], strict=True):
            steps[f"{name}/{step}"] = sql
    return steps


QUERY_FILES = sorted(
    p.name
    for p in MYSQL_DIR.glob("*.sql")
    if re.search(r"^-- name: ", p.read_text("utf-8"), flags=re.M)
)


def test_the_runtime_query_files_are_all_scanned():
    assert {"queries.sql", "inspection.sql", "limits.sql", "periodic.sql"} <= set(QUERY_FILES)


@pytest.mark.parametrize("filename", QUERY_FILES)
def test_runtime_queries_have_no_mariadb_only_syntax(filename):
    found = []
    for key, sql in _query_steps(filename).items():
        if key.rsplit("/", 1)[-1] in MARIADB_ONLY_STEPS:
            continue
        found += [f"{filename} {key}: {f}" for f in findings(sql)]
    assert found == [], "\n".join(found)


def _sql_literals(path: Path) -> list[tuple[int, str]]:
    """String literals (f-string parts joined) of a module, docstrings left out."""
    tree = ast.parse(path.read_text("utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                out.append((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            out.append((node.lineno, text))
    return out


# The Python modules that build SQL sent to a MySQL server.
PY_MODULES = (
    sorted(MYSQL_DIR.glob("*.py"))
    + [
        ROOT / "nsj_queue_lib" / "db" / name
        for name in ("sql_files.py", "limits_store.py", "periodic_store.py", "task_session.py")
    ]
    + [
        ROOT / "nsj_queue_lib" / "flow" / name
        for name in ("limits.py", "lock_keys.py", "deliveries.py")
    ]
)


@pytest.mark.parametrize("path", PY_MODULES, ids=lambda p: p.name)
def test_python_built_sql_has_no_mariadb_only_syntax(path):
    found = []
    for line, text in _sql_literals(path):
        if not re.search(r"\b(SELECT|UPDATE|INSERT|DELETE|CALL|DO|SET|ALTER|CREATE)\b", text):
            continue
        found += [f"{path.name}:{line}: {f}" for f in findings(text)]
    assert found == [], "\n".join(found)


class _Cursor:
    def __init__(self, conn):
        self.conn = conn
        self.lastrowid = 41
        self._rows: list = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, sql, args=None):
        self.conn.sent.append(sql)
        if "memsql_version" in sql:
            self._rows = []
        elif "auto_increment_increment" in sql:
            self._rows = [(1,)]
        else:
            self._rows = []
        return 1

    def fetchall(self):
        return self._rows

    def fetchone(self):
        return self._rows[0] if self._rows else None


class _Mysql8Connection:
    """What a PyMySQL connection to MySQL 8.0 looks like to the store: no 'MariaDB' in
    its handshake's version."""

    server_version = "8.0.36"
    db = "public"

    def __init__(self):
        self.sent: list[str] = []

    def cursor(self):
        return _Cursor(self)

    def escape(self, value):
        return "'" + str(value).replace("'", "''") + "'"


def test_inserts_send_no_returning_to_mysql():
    from nsj_queue_lib.db.mysql.store import MysqlQueueStore

    conn = _Mysql8Connection()
    store = MysqlQueueStore("public.q", "public.q_subscriber")
    ids = store.insert_tasks(
        conn,
        [
            {
                "origem": "o",
                "destino": "d",
                "processo": "p",
                "chave_externa": None,
                "payload": "{}",
                "payload_hash": None,
                "tenant": None,
                "grupo_empresarial": None,
                "pub_sub": False,
            }
        ]
        * 3,
    )
    assert ids == [41, 42, 43]
    inserts = [sql for sql in conn.sent if sql.lstrip().upper().startswith("INSERT")]
    assert inserts and not any("RETURNING" in sql.upper() for sql in inserts)
    assert all(findings(sql) == [] for sql in conn.sent), conn.sent
