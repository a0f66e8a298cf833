"""The runtime speaks of tasks; the task session (db/task_session.py) speaks of transactions.

Read from the source with ``ast``: no module of ``runtime/`` calls a method
that opens, commits or rolls back a transaction or sets a savepoint
(``begin``, ``commit``, ``rollback``, their combinations, ``savepoint``...),
on any object: not a drain, a recovery path, the liveness or the limited
claim. (The maintenance services, ``SERVICE_ROUNDS``, work in rounds on
connections of their own, where no task's transaction is.) And 'sucesso' has at most
two writers per dialect (issue 38): the claim routine's completion of one
task, and one statement for many.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "nsj_queue_lib" / "runtime"
DB = ROOT / "nsj_queue_lib" / "db"

TRANSACTION_VERBS = re.compile(r"^(begin|commit|rollback|savepoint)(_|$)|_(begin|savepoint)$")
# The maintenance services: each works in rounds on a connection of its own (no task's
# transaction is there), and ends each round itself.
SERVICE_ROUNDS = {
    "service.py",  # the service lock's holder connection
    "periodic_service.py",
    "registry.py",
    "renotify.py",
    "purge.py",
    "tally.py",
    "retry.py",  # its rescue reads orphans row-locked, a round at a time
}
TASK_PATH = sorted(p for p in RUNTIME.glob("*.py") if p.name not in SERVICE_ROUNDS)


def transaction_calls(source: str) -> list[str]:
    """Each call of a transaction verb in ``source``: 'line: name'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if TRANSACTION_VERBS.search(name):
                found.append(f"{node.lineno}: {name}")
    return found


@pytest.mark.parametrize("path", TASK_PATH, ids=lambda p: p.name)
def test_the_runtime_never_ends_a_transaction_itself(path):
    assert transaction_calls(path.read_text(encoding="utf-8")) == [], (
        f"{path.name} ends a transaction itself: say what happens to the task through the "
        "task session (db/task_session.py)"
    )


def test_the_service_list_names_existing_modules():
    assert {p.name for p in RUNTIME.glob("*.py")} >= SERVICE_ROUNDS


@pytest.mark.parametrize(
    "source",
    [
        "store.begin(conn)",
        "conn.commit()",
        "self.store.rollback_and_begin(conn)",
        "store.commit_and_begin(conn)",
        "ops.savepoint(conn, group)",
        "ops.rollback_to_savepoint(conn)",
        "conn.rollback()",
    ],
)
def test_the_check_catches_a_planted_transaction_verb(source):
    assert transaction_calls(source) != []


@pytest.mark.parametrize(
    "source",
    ["session.settle_group(conn, group, 3)", "session.undo_handler(conn)", "committed(done)"],
)
def test_the_check_lets_the_session_s_verbs_be(source):
    assert transaction_calls(source) == []


# Where each dialect writes 'sucesso' (SQL text and the Python that builds it).
SUCCESS_WRITE = re.compile(r"SET\s+status\s*=\s*'sucesso'", re.IGNORECASE)


def success_writers(folder: Path) -> list[str]:
    writers = []
    for path in sorted(folder.iterdir()):
        if path.suffix in (".sql", ".py"):
            text = path.read_text(encoding="utf-8")
            writers += [f"{path.name}:{m.start()}" for m in SUCCESS_WRITE.finditer(text)]
    return writers


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "singlestore"])
def test_sucesso_has_at_most_two_writers_per_dialect(dialect):
    writers = success_writers(DB / dialect)
    if dialect == "singlestore":
        writers += success_writers(DB / "mysql")  # it builds on MySQL's store
        writers = [w for w in writers if not w.startswith("claim_procedure.sql")]
    assert 1 <= len(writers) <= 2, writers


def test_the_writer_count_sees_a_third_writer(tmp_path):
    for name in ("a.sql", "b.py", "c.sql"):
        (tmp_path / name).write_text("UPDATE t SET status = 'sucesso' WHERE id = 1")
    assert len(success_writers(tmp_path)) == 3
