"""Which MySQL errors are transient (a periodic service's run is tried again at once), and
a failed service run retried on them only (nsj_queue_lib/runtime/service.py)."""

from __future__ import annotations

import threading

import pymysql
import pytest

from nsj_queue_lib.db.mysql.galera import is_transient_error
from nsj_queue_lib.exceptions import DatabaseError


@pytest.mark.parametrize(
    ("code", "transient"),
    [(1213, True), (1205, True), (1047, True), (1062, False), (1146, False), (2013, False)],
)
def test_deadlocks_lock_waits_and_wsrep_not_ready_are_transient(code, transient):
    assert is_transient_error(pymysql.err.OperationalError(code, "x")) is transient


def test_the_mysql_driver_finds_a_transient_error_under_the_store_s_wrapper():
    from nsj_queue_lib.db.mysql.driver import MysqlDriver

    cause = pymysql.err.OperationalError(1213, "Deadlock: wsrep aborted transaction")
    try:
        try:
            raise cause
        except pymysql.err.OperationalError as exc:
            raise DatabaseError("find_orphans failed") from exc
    except DatabaseError as wrapped:
        error = wrapped
    driver = MysqlDriver.__new__(MysqlDriver)
    assert driver.is_transient(error)
    assert not driver.is_transient(DatabaseError("no cause"))


class FlakyService:
    """Just what ``PeriodicService.run_retrying`` uses."""

    def __init__(self, failures: list[BaseException]):
        from nsj_queue_lib.runtime.service import PeriodicService

        self.failures = list(failures)
        self.calls = 0
        self.stop = threading.Event()
        self.name = "flaky"
        self.settings = type("S", (), {"queue_name": "q"})()
        self.transient = lambda exc: "transient" in str(exc)
        self.run_retrying = PeriodicService.run_retrying.__get__(self)

    def run_once(self):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return 7


def test_a_run_failed_on_a_transient_error_runs_again_at_once():
    service = FlakyService([RuntimeError("transient 1"), RuntimeError("transient 2")])
    assert service.run_retrying() == 7
    assert service.calls == 3


def test_a_run_failed_on_another_error_is_not_run_again():
    service = FlakyService([RuntimeError("broken")])
    with pytest.raises(RuntimeError, match="broken"):
        service.run_retrying()
    assert service.calls == 1


def test_transient_failures_past_the_retries_leave_as_the_last_error():
    from nsj_queue_lib.runtime.service import TRANSIENT_RETRIES

    service = FlakyService([RuntimeError(f"transient {i}") for i in range(TRANSIENT_RETRIES + 1)])
    with pytest.raises(RuntimeError, match=f"transient {TRANSIENT_RETRIES}"):
        service.run_retrying()
    assert service.calls == TRANSIENT_RETRIES + 1


class Conn:
    def __init__(self, error: BaseException | None):
        self.error = error

    def rollback(self):
        if self.error is not None:
            raise self.error


def test_a_rollback_answered_with_1213_has_rolled_back_and_other_errors_leave():
    from nsj_queue_lib.db.mysql.galera import rollback

    rollback(Conn(None))
    rollback(Conn(pymysql.err.OperationalError(1213, "Deadlock: wsrep aborted transaction")))
    with pytest.raises(pymysql.err.OperationalError):
        rollback(Conn(pymysql.err.OperationalError(2013, "Lost connection")))
