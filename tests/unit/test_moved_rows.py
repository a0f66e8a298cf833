"""db/moved_rows.py: a statement that fails on a row moved to another partition
(40001) runs again, under a savepoint inside a transaction; other errors pass through."""

from __future__ import annotations

import pytest

from nsj_queue_lib.db.moved_rows import ATTEMPTS, retry_moved_rows
from nsj_queue_lib.exceptions import DatabaseError


class Moved(Exception):
    sqlstate = "40001"


class FakeConn:
    def __init__(self, autocommit=False, status=2):
        self.autocommit = autocommit
        self.info = type("Info", (), {"transaction_status": status})()
        self.sent: list[str] = []

    def cursor(self):
        conn = self

        class Cursor:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def execute(self, sql):
                conn.sent.append(sql.split()[0] if sql.startswith("SAVEPOINT") else sql)

        return Cursor()


def failing(times, error=None):
    calls = []

    def statement():
        calls.append(1)
        if len(calls) <= times:
            raise DatabaseError("moved") from (error or Moved())
        return len(calls)

    return statement


def test_a_moved_row_runs_the_statement_again_under_a_savepoint():
    conn = FakeConn()
    assert retry_moved_rows(conn, failing(1)) == 2
    assert conn.sent == [
        "SAVEPOINT",
        "ROLLBACK TO SAVEPOINT nsjq_moved_row",
        "SAVEPOINT",
        "RELEASE SAVEPOINT nsjq_moved_row",
    ]


def test_autocommit_outside_a_transaction_needs_no_savepoint():
    conn = FakeConn(autocommit=True, status=0)
    assert retry_moved_rows(conn, failing(2)) == 3
    assert conn.sent == []


def test_other_errors_and_the_last_attempt_propagate():
    with pytest.raises(DatabaseError):
        retry_moved_rows(FakeConn(), failing(1, ValueError("other")))
    with pytest.raises(DatabaseError):
        retry_moved_rows(FakeConn(), failing(ATTEMPTS))
