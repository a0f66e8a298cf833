"""PostgreSQL executors shaped for Django's ORM (``nsj_queue_lib.contrib.django``'s worker).

A Django task runs on the executor connection of its attempt, so that what it writes
commits with the task's 'sucesso'. Django's psycopg 3 backend sets its own connections
up in ways the worker's are not: its adapters (jsonb, inet and cidr read as text,
timestamptz loaded in Django's time zone), the session's time zone that those loaders
assume, and its cursor class (client-side binding unless ``server_side_binding``). The
executors get the adapters and the time zone when they connect; the cursor class only
while a task holds the connection (``lend``), so that the worker's own statements keep
psycopg's cursor.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nsj_queue_lib.db.postgres.driver import PostgresDriver
from nsj_queue_lib.db.postgres.errors import wrap_driver_errors
from nsj_queue_lib.exceptions import ConfigError

# set_config() takes the zone as a parameter (SET TIME ZONE would not).
_SET_TIME_ZONE = "SELECT set_config('TimeZone', %s, false)"


class DjangoDriver(PostgresDriver):
    def __init__(self, settings: Any, wrapper: Any) -> None:
        super().__init__(settings)
        from django.db.backends.postgresql.psycopg_any import is_psycopg3

        if not is_psycopg3:
            raise ConfigError(
                {
                    "DATABASES": f"Django's connection {wrapper.alias!r} runs on psycopg2; the "
                    "worker lends it psycopg 3 connections: uninstall psycopg2 or install "
                    "psycopg 3 so that Django picks it"
                }
            )
        params = wrapper.get_connection_params()
        self._context = params["context"]
        self._cursor_factory = params["cursor_factory"]
        self._time_zone: str | None = wrapper.timezone_name

    def executor_connect_options(self) -> dict[str, Any]:
        return {"context": self._context}

    def _configure_executor(self, conn: Any) -> None:
        super()._configure_executor(conn)
        # The executors are in autocommit: the setting holds for the session, as Django's.
        if self._time_zone and conn.info.parameter_status("TimeZone") != self._time_zone:
            with wrap_driver_errors("configure_connection"):
                conn.execute(_SET_TIME_ZONE, (self._time_zone,))

    @contextmanager
    def lend(self, conn: Any) -> Iterator[Any]:
        """``conn`` as Django's cursor() expects it, while a task runs on it."""
        previous = conn.cursor_factory
        conn.cursor_factory = self._cursor_factory
        try:
            yield conn
        finally:
            conn.cursor_factory = previous
