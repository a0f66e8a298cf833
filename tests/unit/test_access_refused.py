"""Which connection failures stop a worker at start (configuration) and which are outages
(retried): PostgreSQL by the server's message, MySQL by the error number."""

from __future__ import annotations

import psycopg
import pymysql
import pytest

from nsj_queue_lib.db.driver import make_driver
from nsj_queue_lib.db.postgres.driver import access_refused
from nsj_queue_lib.exceptions import DatabaseAccessError, DatabaseError
from nsj_queue_lib.settings import Settings

PREFIX = 'connection failed: connection to server at "127.0.0.1", port 5432 failed: '


@pytest.mark.parametrize(
    "message, check",
    [
        ('FATAL:  database "erp" does not exist', "DB_BASE"),
        ('FATAL:  role "app" does not exist', "DB_USER"),
        ('FATAL:  role "app" is not permitted to log in', "DB_USER"),
        ('FATAL:  password authentication failed for user "app"', "DB_USER, DB_PASS"),
        ('FATAL:  Ident authentication failed for user "app"', "DB_USER, DB_PASS"),
        ("fe_sendauth: no password supplied", "DB_PASS"),
        ('FATAL:  no pg_hba.conf entry for host "10.0.0.1", user "app", database "erp"', "DB_"),
        ('FATAL:  permission denied for database "erp"', "DB_USER, DB_BASE"),
    ],
)
def test_postgresql_refusals_are_configuration(message, check):
    refused = access_refused(psycopg.OperationalError(PREFIX + message))
    assert isinstance(refused, DatabaseAccessError)
    assert str(refused).startswith("connecting to PostgreSQL refused: ")
    assert f"(check {check}" in str(refused)


@pytest.mark.parametrize(
    "message",
    [
        "Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?",
        "FATAL:  the database system is starting up",
        "FATAL:  sorry, too many clients already",
        'FATAL:  too many connections for role "app"',
        "timeout expired",
    ],
)
def test_postgresql_outages_are_retried(message):
    assert access_refused(psycopg.OperationalError(PREFIX + message)) is None


@pytest.mark.parametrize(
    "code, refused",
    [(1044, True), (1045, True), (1049, True), (2003, False), (1040, False), (2013, False)],
)
def test_mysql_refusals_by_error_number(monkeypatch, code, refused):
    def connect(**kwargs):
        raise pymysql.err.OperationalError(code, "the server's words")

    # Every worker connection is built as the driver's HandlerConnection (a pymysql Connection).
    monkeypatch.setattr("nsj_queue_lib.db.mysql.driver.HandlerConnection", connect)
    settings = Settings(
        db_driver="MYSQL", db_host="h", db_name="d", db_user="u", queue_name="q", queue_table="q"
    )
    with pytest.raises(DatabaseError) as info:
        make_driver(settings).connect()
    assert isinstance(info.value, DatabaseAccessError) is refused
    if refused:
        assert str(info.value).startswith("connecting to MySQL refused: the server's words (check ")
