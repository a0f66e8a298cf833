"""The worker of Django tasks: ``python manage.py nsjq_worker`` or
``python -m nsj_queue_lib.contrib.django`` (with DJANGO_SETTINGS_MODULE set).

It serves the queue table of one Django queue (``--queue``, default ``default``) of one
backend (``--backend``, default ``default``), on the database of that backend's
``OPTIONS["DATABASE"]``: the connection settings come from Django's ``DATABASES``
(HOST, PORT, NAME, USER, PASSWORD), the queue's from the table's name; every other
setting from the environment as for any worker (QUEUE_CONCURRENCY, QUEUE_MAX_RETRY...).

Each task's function is imported by its path and called with its arguments while
Django's connection holds the attempt's connection (``lending.py``): its ORM writes
commit with the task's 'sucesso' or roll back with its failure.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils import timezone

from nsj_queue_lib.contrib.django.backend import QueueBackend
from nsj_queue_lib.contrib.django.calls import read_payload, result_id
from nsj_queue_lib.contrib.django.compat import (
    DEFAULT_TASK_QUEUE_NAME,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    task_backends,
    task_finished,
    task_started,
)
from nsj_queue_lib.contrib.django.lending import lent_connection
from nsj_queue_lib.contrib.django.results import encode_return_value, task_result
from nsj_queue_lib.db.driver import Driver, client_inspection_store, django_db_driver, django_driver
from nsj_queue_lib.dbapi import DBConnection
from nsj_queue_lib.exceptions import ConfigError, PermanentError, TaskCancelled
from nsj_queue_lib.settings import Settings
from nsj_queue_lib.worker_base import EXIT_CONFIG_ERROR, WorkerBase

# The variables the worker takes from Django's DATABASES and the backend's OPTIONS instead
# of the environment (with their aliases, so that no stale one contradicts them).
_FROM_DJANGO = (
    "DB_DRIVER",
    *("DB_HOST", "DATABASE_HOST", "DB_PORT", "DATABASE_PORT", "DB_BASE", "DATABASE_NAME"),
    *("DB_USER", "DATABASE_USER", "DB_PASS", "DATABASE_PASS"),
    *("QUEUE_NAME", "QUEUE_TABLE", "QUEUE_SUBSCRIBER_TABLE"),
)


class TaskFunctionError(Exception):
    """A Django task function raised; the subclass is named by the original exception's
    import path (``_failure_class``)."""


@functools.lru_cache(maxsize=256)
def _failure_class(path: str) -> type[TaskFunctionError]:
    # The worker stores a failure as "<class name>: <text>": a class named by the path
    # keeps it in mensagem, where get_result reads TaskError.exception_class_path.
    return type(path, (TaskFunctionError,), {"__module__": __name__})


def queue_backend(alias: str) -> QueueBackend:
    backend = task_backends[alias]
    if not isinstance(backend, QueueBackend):
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}] is {type(backend).__name__}, not nsj_queue_lib's QueueBackend"
        )
    return backend


def worker_environment(
    backend: QueueBackend, queue_name: str, environ: Mapping[str, str]
) -> dict[str, str]:
    """The worker's environment: ``environ`` with the database and the queue of ``backend``'s
    Django queue ``queue_name``. Raises ``ConfigError``."""
    options = backend.queue_options
    database = django_settings.DATABASES[options.database]
    vendor = connections[options.database].vendor
    driver_value = django_db_driver(vendor)
    if driver_value is None:
        raise ConfigError(
            {
                "DATABASES": f"{options.database!r} is a {vendor} database: not one the worker runs on"
            }
        )
    table = backend.table_of(queue_name)
    env = {key: value for key, value in environ.items() if key not in _FROM_DJANGO}
    env.update(
        DB_DRIVER=driver_value,
        # Django's empty HOST is the local server.
        DB_HOST=str(database.get("HOST") or "localhost"),
        DB_BASE=str(database.get("NAME") or ""),
        DB_USER=str(database.get("USER") or ""),
        DB_PASS=str(database.get("PASSWORD") or ""),
        QUEUE_TABLE=table,
        # db_gen names a queue's objects (its NOTIFY channel...) after the table's name.
        QUEUE_NAME=table.rpartition(".")[2],
    )
    if database.get("PORT"):
        env["DB_PORT"] = str(database["PORT"])
    if options.subscriber_table is not None:
        env["QUEUE_SUBSCRIBER_TABLE"] = options.subscriber_table
    return env


def worker_settings(
    backend_alias: str = "default",
    queue_name: str = DEFAULT_TASK_QUEUE_NAME,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """The settings of the worker of a Django queue. Raises ``ConfigError``."""
    backend = queue_backend(backend_alias)
    env = worker_environment(backend, queue_name, os.environ if environ is None else environ)
    return Settings.from_env(env)


class DjangoTaskWorker(WorkerBase):
    """Runs the Django tasks of one queue table; ``settings``: ``worker_settings()``'s."""

    def __init__(self, settings: Settings, backend_alias: str = "default") -> None:
        super().__init__(settings)
        self.backend = queue_backend(backend_alias)
        self.database = self.backend.queue_options.database
        self._driver: Any = None

    def runtime_driver(self, settings: Settings) -> Driver:
        self._driver = django_driver(settings, connections[self.database])
        return self._driver

    def execute(self, payload: str, tarefa: dict[str, Any], bd_conn: DBConnection) -> str:
        call = read_payload(payload)
        if call is None:
            raise PermanentError("not a Django task: its payload names no task function")
        task = self.backend.task_of(call)
        running = self._running(task, call, tarefa, bd_conn)
        with lent_connection(self.database, bd_conn, self._driver.lend):
            task_started.send(type(self.backend), task_result=running)
            try:
                arguments = [TaskContext(task_result=running)] if task.takes_context else []
                value = task.call(*arguments, *call["args"], **call["kwargs"])
                mensagem = encode_return_value(value)
            except Exception as exc:
                _finish(running, TaskResultStatus.FAILED, error=exc)
                task_finished.send(type(self.backend), task_result=running)
                if isinstance(exc, (PermanentError, TaskCancelled)):
                    raise  # the worker's own signals: no retry, or a cancelled task
                path = f"{type(exc).__module__}.{type(exc).__qualname__}"
                raise _failure_class(path)(str(exc)) from exc
            _finish(running, TaskResultStatus.SUCCESSFUL, value=value)
            task_finished.send(type(self.backend), task_result=running)
        return mensagem

    def _running(
        self, task: Task, call: Mapping[str, Any], tarefa: Mapping[str, Any], bd_conn: Any
    ) -> TaskResult:
        """The task's result as it starts (RUNNING, its earlier attempts' errors): what
        ``TaskContext`` and the task_started/task_finished signals carry."""
        first = int(tarefa.get("id_inicial") or tarefa["id"])
        table = self.backend.table_of(call["queue_name"])
        attempts = client_inspection_store(bd_conn, table).task_attempts(bd_conn, first)
        return task_result(task, result_id(call["queue_name"], first), call, attempts)


def _finish(
    result: TaskResult,
    status: TaskResultStatus,
    value: Any = None,
    error: BaseException | None = None,
) -> None:
    """``result`` as the attempt ends (for the signals; the queue table has the truth)."""
    # TaskResult is frozen; Django's own backends update theirs the same way.
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    if error is not None:
        path = f"{type(error).__module__}.{type(error).__qualname__}"
        text = "".join(traceback.format_exception(error))
        result.errors.append(TaskError(exception_class_path=path, traceback=text))


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    """Run the worker of a Django queue until stopped (SIGTERM, SIGINT); exits the process."""
    parser = argparse.ArgumentParser(prog=prog, description=main.__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    run(args.backend, args.queue)


def add_arguments(parser: Any) -> None:
    parser.add_argument("--backend", default="default", help="the TASKS alias (default: default)")
    parser.add_argument(
        "--queue", default=DEFAULT_TASK_QUEUE_NAME, help="the Django queue name (default: default)"
    )


def run(backend_alias: str, queue_name: str) -> None:
    try:
        settings = worker_settings(backend_alias, queue_name)
    except ConfigError as exc:
        for name, why in exc.problems.items():
            print(f"nsj_queue_lib: configuration error: {name} {why}", file=sys.stderr)
        sys.exit(EXIT_CONFIG_ERROR)
    DjangoTaskWorker(settings, backend_alias).run()
