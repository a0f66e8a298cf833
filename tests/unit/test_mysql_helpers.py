"""MysqlQueueStore without a database: lock names, times, SQL steps, and the
deadlock / lock wait timeout retries (driven by a scripted fake connection)."""

from __future__ import annotations

import datetime
import decimal

import pymysql
import pytest

from nsj_queue_lib.db.mysql import store as mysql_store
from nsj_queue_lib.db.mysql.store import (
    MysqlQueueStore,
    due_sql,
    exact_epoch,
    lock_prefix,
    qualified_table,
    retry_on_lock_errors,
    split_steps,
    stable_queue_number,
)
from nsj_queue_lib.exceptions import DatabaseError

UTC = datetime.timezone.utc
DEADLOCK = pymysql.err.OperationalError(
    1213, "Deadlock found when trying to get lock; try restarting transaction"
)
LOCK_WAIT = pymysql.err.OperationalError(
    1205, "Lock wait timeout exceeded; try restarting transaction"
)
GONE = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(mysql_store, "RETRY_BASE_DELAY", 0.0)


# -- pure helpers ------------------------------------------------------------------


def test_split_steps():
    sql = (
        "-- comment\n-- step: one\nSELECT 1;\n-- step: two\n-- inner comment\nUPDATE t SET a = 1;\n"
    )
    assert split_steps(sql) == {"one": "SELECT 1", "two": "-- inner comment\nUPDATE t SET a = 1"}
    assert split_steps("SELECT 2;") == {"sql": "SELECT 2"}
    with pytest.raises(ValueError, match="twice"):
        split_steps("-- step: a\nSELECT 1\n-- step: a\nSELECT 2")


def test_lock_prefix_is_readable_when_it_fits_and_hashed_otherwise():
    assert lock_prefix("test.fila") == "nsjq:test.fila:"
    long = "d" * 20 + "." + "t" * 30
    hashed = lock_prefix(long)
    assert hashed.startswith("nsjq:") and len(hashed) == len("nsjq:") + 16 + 1
    assert lock_prefix(long) == hashed != lock_prefix(long + "x")
    # Lock names are case-insensitive on the server: mixed case is hashed to stay distinct.
    assert lock_prefix("test.Fila") != lock_prefix("test.fila")
    for name in ("a.b", "x" * 63 + "." + "y" * 63, "db.Fila"):
        assert len(lock_prefix(name)) + len(f"svc:{-(2**63)}") <= 64


def test_qualified_table_uses_the_connections_database():
    class Conn:
        db = b"appdb"

    assert qualified_table("fila", Conn()) == "appdb.fila"
    assert qualified_table("other.fila", Conn()) == "other.fila"
    assert qualified_table("fila") == "fila"


def test_stable_queue_number():
    assert stable_queue_number("test.fila") == stable_queue_number("test.fila")
    assert stable_queue_number("test.fila") != stable_queue_number("test.fila2")
    assert all(0 <= stable_queue_number(f"db.q{n}") < 2**31 for n in range(200))


def test_due_sql():
    assert due_sql(None) == ("DEFAULT", [])
    naive = datetime.datetime(2030, 1, 2, 3, 4, 5, 6)
    assert due_sql(naive) == ("%s", [naive])
    aware = datetime.datetime(
        2030, 1, 2, 3, 4, 5, 123456, tzinfo=datetime.timezone(datetime.timedelta(hours=-3))
    )
    sql, args = due_sql(aware)
    assert sql == "FROM_UNIXTIME(%s)"
    assert args == [decimal.Decimal("1893564245.123456")]  # 2030-01-02 06:04:05.123456 UTC
    assert datetime.datetime.fromtimestamp(float(args[0]), UTC) == aware
    with pytest.raises(ValueError, match="2038"):
        due_sql(datetime.datetime(2038, 1, 19, 3, 14, 8, tzinfo=UTC))
    with pytest.raises(ValueError):
        due_sql(datetime.datetime(1960, 1, 1, tzinfo=UTC))


def test_exact_epoch_keeps_every_microsecond():
    moment = datetime.datetime(2037, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert exact_epoch(moment) == decimal.Decimal("2145916799.999999")


def test_batches_split_by_size(monkeypatch):
    monkeypatch.setattr(mysql_store, "INSERT_BATCH_BYTES", 1000)
    values = [("(%s)", ["x" * 100]) for _ in range(20)]
    batches = list(mysql_store._batches(values))
    assert sum(len(b) for b in batches) == 20 and len(batches) > 1
    assert [v for b in batches for v in b] == values
    assert list(mysql_store._batches([("(%s)", ["x" * 5000])])) == [[("(%s)", ["x" * 5000])]]


def test_retry_helper():
    calls = []

    def attempt():
        calls.append("try")
        if len(calls) < 3:
            raise DEADLOCK if len(calls) == 1 else LOCK_WAIT
        return "done"

    undone = []
    assert retry_on_lock_errors("op", attempt, lambda: undone.append(1)) == "done"
    assert calls == ["try"] * 3 and undone == [1, 1]

    with pytest.raises(pymysql.err.OperationalError):  # not a lock error: no retry
        retry_on_lock_errors("op", lambda: (_ for _ in ()).throw(GONE), lambda: undone.append(2))
    assert 2 not in undone

    def always():
        raise DEADLOCK

    with pytest.raises(DatabaseError, match="failed 5 times") as info:
        retry_on_lock_errors("op", always, lambda: None)
    assert info.value.__cause__ is DEADLOCK


# -- a scripted connection ---------------------------------------------------------


class FakeCursor:
    def __init__(self, conn):
        self.conn = conn
        self.description = None
        self._rows: list = []
        self.lastrowid = None
        self.rowcount = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, sql, args=None):
        self.conn.log.append(sql)
        outcome = self.conn.script(sql, args)
        if isinstance(outcome, BaseException):
            raise outcome
        rows, names = outcome if isinstance(outcome, tuple) else (outcome, None)
        self._rows = list(rows or [])
        self.description = (
            [(n,) for n in names] if names else (None if not self._rows else [("c",)] * 2)
        )
        self.rowcount = len(self._rows) if rows is not None else 1
        return self.rowcount

    def fetchall(self):
        rows, self._rows = self._rows, []
        return rows

    def fetchone(self):
        return self._rows.pop(0) if self._rows else None


class FakeConn:
    db = b"test"
    server_version = "10.11.0-MariaDB"

    def __init__(self, script):
        self.script = script
        self.log: list[str] = []

    def cursor(self):
        return FakeCursor(self)

    def begin(self):
        self.log.append("BEGIN")

    def commit(self):
        self.log.append("COMMIT")

    def rollback(self):
        self.log.append("ROLLBACK")


COLUMNS = list(mysql_store.model.QUEUE_COLUMNS)


def task_row(task_id: int) -> tuple:
    values = {c: None for c in COLUMNS}
    values.update(
        id=task_id,
        status="pendente",
        payload="p",
        tentativa=1,
        pub_sub=0,
        dead=0,
        reenfileirado=0,
        estouro_tentativas=0,
        prioridade=50,
    )
    return tuple(values[c] for c in COLUMNS)


def kind(sql: str) -> str:
    head = sql.split("\n")
    text = " ".join(line for line in head if not line.lstrip().startswith("--"))
    if text.startswith("SELECT t.id, t.id_inicial"):
        return "select"
    if "SET status = 'processando'" in text:
        return "mark"
    if "GET_LOCK" in text:
        return "lock"
    if "RELEASE_LOCK" in text:
        return "unlock"
    if "SET status = 'sucesso'" in text:
        return "complete"
    if "SET status = 'pendente'" in text:
        return "release"
    return text.split()[0]


def test_a_deadlock_in_the_claim_is_retried_and_its_locks_released():
    failures = iter([DEADLOCK])
    attempts = []

    def script(sql, args):
        k = kind(sql)
        if k == "select":
            attempts.append(1)
            return [task_row(7)], COLUMNS
        if k == "lock":
            return [(7, 1, None)], ["id", "liveness_locked", "first_payload"]
        if sql == "COMMIT AND CHAIN" and len(attempts) == 1:
            return next(failures)  # the lock was taken: it must be released before trying again
        return None

    conn = FakeConn(script)
    tasks = MysqlQueueStore("test.q").claim(conn, 1)
    assert [t["id"] for t in tasks] == [7] and tasks[0]["liveness_locked"] is True
    assert tasks[0]["status"] == "processando"
    kinds = [kind(s) if s not in ("BEGIN", "ROLLBACK", "COMMIT") else s for s in conn.log]
    assert kinds == [
        "BEGIN",
        "select",
        "mark",
        "lock",
        "COMMIT",  # COMMIT AND CHAIN failed
        "ROLLBACK",
        "unlock",
        "BEGIN",
        "select",
        "mark",
        "lock",
        "COMMIT",
    ]


def test_a_deadlock_in_the_mark_step_is_retried():
    failures = iter([DEADLOCK, LOCK_WAIT])

    def script(sql, args):
        k = kind(sql)
        if k == "select":
            return [task_row(3)], COLUMNS
        if k == "mark":
            return next(failures, None)
        if k == "lock":
            return [(3, 1, None)], ["id", "liveness_locked", "first_payload"]
        return None

    conn = FakeConn(script)
    assert [t["id"] for t in MysqlQueueStore("test.q").claim(conn, 1)] == [3]
    assert conn.log.count("ROLLBACK") == 2 and conn.log.count("BEGIN") == 3
    assert not [s for s in conn.log if kind(s) == "unlock"]  # no lock had been taken


def test_claim_gives_up_after_repeated_deadlocks_with_a_database_error():
    def script(sql, args):
        return DEADLOCK if kind(sql) == "select" else None

    conn = FakeConn(script)
    with pytest.raises(DatabaseError, match="claim failed 5 times") as info:
        MysqlQueueStore("test.q").claim(conn, 1)
    assert isinstance(info.value.__cause__, pymysql.err.OperationalError)
    assert conn.log.count("BEGIN") == 5


def test_other_claim_errors_undo_and_surface_as_database_error():
    def script(sql, args):
        k = kind(sql)
        if k == "select":
            return [task_row(4)], COLUMNS
        if k == "lock":
            return [(4, 1, None)], ["id", "liveness_locked", "first_payload"]
        if sql == "COMMIT AND CHAIN":
            return GONE
        return None

    conn = FakeConn(script)
    with pytest.raises(DatabaseError) as info:
        MysqlQueueStore("test.q").claim(conn, 1)
    assert info.value.__cause__ is GONE
    assert conn.log[-2:] == ["ROLLBACK", conn.log[-1]] and kind(conn.log[-1]) == "unlock"


def test_a_lock_wait_timeout_when_completing_retries_the_update_in_the_same_transaction():
    failures = iter([LOCK_WAIT, LOCK_WAIT])

    def script(sql, args):
        return next(failures, None) if kind(sql) == "complete" else None

    conn = FakeConn(script)
    assert MysqlQueueStore("test.q").complete_and_claim(conn, 9, "ok", (0, 9), 0) == []
    assert [kind(s) if s not in ("COMMIT", "ROLLBACK", "BEGIN") else s for s in conn.log] == [
        "complete",
        "complete",
        "complete",
        "unlock",
        "COMMIT",
    ]


def test_a_deadlock_when_completing_gives_the_task_back():
    def script(sql, args):
        return DEADLOCK if kind(sql) == "complete" else None

    conn = FakeConn(script)
    assert MysqlQueueStore("test.q").complete_and_claim(conn, 9, "ok", (0, 9), 0) == []
    assert [kind(s) if s not in ("COMMIT", "ROLLBACK", "BEGIN") else s for s in conn.log] == [
        "complete",
        "ROLLBACK",
        "BEGIN",
        "release",
        "unlock",
        "COMMIT",
    ]
    release = next(s for s in conn.log if kind(s) == "release")
    assert "status = 'processando'" in release  # only a task still ours goes back


def test_complete_if_running_after_a_deadlock_gives_the_task_back():
    def script(sql, args):
        return DEADLOCK if kind(sql) == "complete" else None

    conn = FakeConn(script)
    assert MysqlQueueStore("test.q").complete_if_running(conn, 9, "ok") is False
    assert "ROLLBACK" in conn.log and any(kind(s) == "release" for s in conn.log)


def test_driver_errors_become_database_error_with_the_cause():
    conn = FakeConn(lambda sql, args: GONE)
    with pytest.raises(DatabaseError) as info:
        MysqlQueueStore("test.q").get_task(conn, 1)
    assert info.value.__cause__ is GONE
