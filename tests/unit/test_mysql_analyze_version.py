"""The MySQL vacuum service's ANALYZE TABLE and the server's version (db/mysql/statistics.py):
MySQL before 8.0.24 flushes the table from its cache on ANALYZE, stalling the queue's
statements behind any long query ("Waiting for table flush"), so the service never
analyzes there; MariaDB 10.5+ (MDEV-15101) and MySQL 8.0.24+ do not flush."""

from __future__ import annotations

import pytest

from nsj_queue_lib.db.mysql.statistics import InnodbStatistics, analyze_stalls_queries


@pytest.mark.parametrize(
    "version, stalls",
    [
        ("8.0.0", True),
        ("8.0.23", True),
        ("8.0.23-log", True),
        ("5.7.44-log", True),
        ("8.0.24", False),
        ("8.0.36-28", False),  # Percona Server's suffix
        ("8.4.3", False),
        ("9.1.0", False),
        ("10.11.19-MariaDB-ubu2204", False),
        ("10.6.21-MariaDB", False),
        ("5.5.5-10.11.6-MariaDB", False),  # the replication prefix of old clients
        ("10.4.34-MariaDB", True),
        ("", True),  # unreadable: the statistics are left to InnoDB
    ],
)
def test_the_version_decides_whether_analyze_would_stall_the_queue(version, stalls):
    assert analyze_stalls_queries(version) is stalls


class Cursor:
    def __init__(self, version: str):
        self.version = version
        self.executed: list[str] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, sql, params=None):
        self.executed.append(sql)

    def fetchone(self):
        return (self.version,) if self.executed[-1] == "SELECT VERSION()" else (5000,)


class Conn:
    def __init__(self, version: str):
        self.cur = Cursor(version)

    def cursor(self):
        return self.cur


def statistics() -> InnodbStatistics:
    steps = {"modified_mysql": "modified", "live_rows_mysql": "live", "rows": "rows"}
    return InnodbStatistics({"table_health": steps, "analyze": {}}, "public.fila")


def test_on_mysql_8_0_23_the_table_never_needs_analyzing_and_the_version_is_read_once():
    stats, conn = statistics(), Conn("8.0.23")
    for _ in range(2):
        health = stats.health(conn, "mysql")
        assert health.changed_since_analyze == 0 and health.dead_rows == 0
    assert conn.cur.executed == ["SELECT VERSION()"]


def test_on_mysql_8_0_24_the_changed_rows_are_counted():
    stats, conn = statistics(), Conn("8.0.24")
    assert stats.health(conn, "mysql").changed_since_analyze == 5000
    assert conn.cur.executed == ["SELECT VERSION()", "modified"]
