"""PyMySQL standing in for mysqlclient (``MySQLdb``), for Django's MySQL backend.

``pymysql.install_as_MySQLdb()`` registers the package under the name ``MySQLdb`` and
nothing else. Django's backend then imports ``MySQLdb.constants`` and
``MySQLdb.converters``, which Python finds in PyMySQL's directory and loads a second time
under the new names: a second ``err`` module among them, whose exception classes replace
``pymysql.err``'s as the package's attribute. From then on ``pymysql.err.OperationalError``
is not the class PyMySQL's connections raise, and ``except`` clauses or ``isinstance``
checks written against it miss real errors (a lost connection taken for a handler's
failure). ``install_as_mysqldb()`` registers every submodule under both names, loaded
once.
"""

from __future__ import annotations

import sys

# Every module of the package, loaded once here under its own name (PyMySQL 1.x).
import pymysql
import pymysql._auth
import pymysql.charset
import pymysql.connections
import pymysql.constants.CLIENT
import pymysql.constants.COMMAND
import pymysql.constants.CR
import pymysql.constants.ER
import pymysql.constants.FIELD_TYPE
import pymysql.constants.FLAG
import pymysql.constants.SERVER_STATUS
import pymysql.converters
import pymysql.cursors
import pymysql.err
import pymysql.optionfile
import pymysql.protocol
import pymysql.times


def install_as_mysqldb() -> None:
    """Make ``import MySQLdb`` (and its submodules) give PyMySQL's own modules."""
    pymysql.install_as_MySQLdb()
    for name, module in list(sys.modules.items()):
        if name.startswith("pymysql."):
            sys.modules.setdefault("MySQLdb." + name.removeprefix("pymysql."), module)
