"""The MySQL store's helpers without a database: lock names, times, SQL steps, insert
batches and the deadlock / lock wait timeout retry loop.

The store's behaviour on a real MariaDB is in tests/integration/store/."""

from __future__ import annotations

import datetime
import decimal
import json
import re

import pymysql
import pytest

from nsj_queue_lib.db.mysql import errors as mysql_errors
from nsj_queue_lib.db.mysql import rows as mysql_rows
from nsj_queue_lib.db.mysql.errors import retry_on_lock_errors
from nsj_queue_lib.db.mysql.names import lock_prefix, qualified_table, stable_queue_number
from nsj_queue_lib.db.mysql.rows import due_sql, exact_epoch, insert_batches, split_steps
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
    monkeypatch.setattr(mysql_errors, "RETRY_BASE_DELAY", 0.0)


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
    monkeypatch.setattr(mysql_rows, "INSERT_BATCH_BYTES", 1000)
    values = [("(%s)", ["x" * 100]) for _ in range(20)]
    batches = list(insert_batches(values))
    assert sum(len(b) for b in batches) == 20 and len(batches) > 1
    assert [v for b in batches for v in b] == values
    assert list(insert_batches([("(%s)", ["x" * 5000])])) == [[("(%s)", ["x" * 5000])]]


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


@pytest.mark.parametrize(
    "document",
    [
        '[1, "a", null, true, 1.5]',
        " [1]",
        "[1] ",
        "[1]x",
        "",
        "\ufeff[1]",
        b"[1, 2]",
        "[NaN]",
        "[1",
    ],
)
def test_the_claim_rows_json_fast_path_gives_what_json_loads_gives(document):
    """rows._loads (the C scanner, json.loads for the rest): the same value, or the same
    error, as json.loads."""
    try:
        expected: object = json.loads(document)
    except ValueError as exc:
        with pytest.raises(type(exc), match=re.escape(str(exc))):
            mysql_rows._loads(document)
    else:
        assert mysql_rows._loads(document) == expected
