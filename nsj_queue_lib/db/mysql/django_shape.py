"""MySQL/MariaDB executors shaped for Django's ORM (``nsj_queue_lib.contrib.django``'s worker).

A Django task runs on the executor connection of its attempt, so that what it writes
commits with the task's 'sucesso'. The worker's connections are PyMySQL's, so Django's
MySQL backend must run on PyMySQL too (``as_mysqldb.install_as_mysqldb()`` before Django
loads it): then its error classes are the connection's. Two of Django's connection
options can only be given when connecting, so the executors connect with them:
``client_flag`` with FOUND_ROWS (an UPDATE counts the rows it matched: ``Model.save()``
of an unchanged row would otherwise find none and INSERT it again) and Django's
converters (``conv``: TIME columns as ``datetime.time``). The worker's own UPDATEs all
change the rows they match (a status goes from 'processando' to another), so their
counts stay what they were.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pymysql

from nsj_queue_lib.db.mysql.driver import MysqlDriver
from nsj_queue_lib.exceptions import ConfigError


class DjangoDriver(MysqlDriver):
    def __init__(self, settings: Any, wrapper: Any) -> None:
        super().__init__(settings)
        if wrapper.Database is not pymysql:
            raise ConfigError(
                {
                    "DATABASES": f"Django's connection {wrapper.alias!r} runs on "
                    f"{wrapper.Database.__name__} (mysqlclient); the worker lends it PyMySQL "
                    "connections: call nsj_queue_lib.db.mysql.as_mysqldb.install_as_mysqldb() at the top of the "
                    "settings module"
                }
            )
        params = wrapper.get_connection_params()
        self._options = {"client_flag": params["client_flag"], "conv": params["conv"]}

    def executor_connect_options(self) -> dict[str, Any]:
        return dict(self._options)

    @contextmanager
    def lend(self, conn: Any) -> Iterator[Any]:
        """``conn`` as Django's cursor() expects it: as it connected."""
        yield conn
