"""PyMySQL as ``MySQLdb`` for Django (nsj_queue_lib/db/mysql/as_mysqldb.py), in fresh
interpreters: what registering it does to ``sys.modules`` lasts for the process."""

from __future__ import annotations

import subprocess
import sys

# What Django's MySQL backend imports, then whether PyMySQL's error classes are still the
# ones its connections raise.
PROBE = """
import sys
{install}
import MySQLdb
from MySQLdb.constants import CLIENT, FIELD_TYPE
from MySQLdb.converters import conversions
import pymysql, pymysql.connections
print(pymysql.err.OperationalError is pymysql.connections.err.OperationalError)
"""


def same_error_classes(install: str) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(install=install)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.strip() == "True"


def test_pymysqls_own_call_leaves_a_second_copy_of_its_error_classes():
    assert not same_error_classes("import pymysql; pymysql.install_as_MySQLdb()")


def test_install_as_mysqldb_keeps_one_copy_of_each_module():
    assert same_error_classes(
        "from nsj_queue_lib.db.mysql.as_mysqldb import install_as_mysqldb; install_as_mysqldb()"
    )
