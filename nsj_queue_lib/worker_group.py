"""Workers of several queues in one process: ``run_workers([WorkerA(sa), WorkerB(sb)])``.

Each worker keeps its own settings: queue, concurrency, retry policies,
maintenance services (retry, renotify, purge) and wake-ups. Workers whose
settings name the same database (driver, host, port, database, user,
password) share one connection pool, sized for all of them. The group
starts them together and stops them together on SIGTERM/SIGINT (or
``stop()``), each with its grace period, and exits 0.

HALT (``NOTIFY <queue>, 'HALT'``) stops only the workers of that queue: the
other queues of the process go on, and the process exits 0 once every queue
has stopped. A worker that ends with an error (a start refused: exit code 2;
a thread of it died: 3) or whose runtime raises (a crash: 3) stops the whole
group: the other queues stop as on SIGTERM, each within its grace period, and
the process exits with that code, so a supervisor (Kubernetes) restarts it
rather than leaving a queue unserved.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nsj_queue_lib.db.driver import ConnectionPool, make_driver
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.settings import Settings

if TYPE_CHECKING:
    from nsj_queue_lib.runtime.worker_runtime import WorkerRuntime
    from nsj_queue_lib.worker_base import WorkerBase

logger = get_logger("group")

EXIT_OK = 0
EXIT_CONFIG_ERROR = 2
EXIT_WORKER_DIED = 3  # as a worker whose thread died (runtime.worker_runtime.EXIT_THREAD_DIED)
JOIN_POLL_SECONDS = 0.2  # the main thread wakes this often, so signals are handled at once


def database_identity(settings: Settings) -> tuple[object, ...]:
    """Workers with equal identities share a pool: every connection setting (host, port,
    TLS...) and synchronous_commit (set per session)."""
    connection = tuple(
        (field.name, getattr(settings, field.name))
        for field in dataclasses.fields(settings)
        if field.name.startswith("db_")
    )
    return (settings.db_driver.upper(), settings.queue_synchronous_commit, *connection)


def _pool_connections(settings: Settings, asynchronous: bool) -> int:
    return settings.async_pool_size if asynchronous else settings.queue_concurrency


class WorkerGroup:
    """Several ``WorkerBase`` instances, each built with its own ``Settings``, in one process."""

    def __init__(self, workers: Sequence[WorkerBase]):
        if not workers:
            raise ValueError("WorkerGroup needs at least one worker")
        missing = [type(w).__name__ for w in workers if w._settings is None]
        if missing:
            raise ValueError(
                f"every worker of a group needs its Settings (WorkerClass(settings)): "
                f"{', '.join(missing)}"
            )
        self.workers = list(workers)
        self.settings = [w._settings for w in self.workers if w._settings is not None]
        self.pools: dict[tuple[object, ...], ConnectionPool] = {}
        self.runtimes: list[WorkerRuntime] = []
        self._stopping = threading.Event()
        self._codes: list[int | None] = [None] * len(self.workers)

    def _check(self) -> None:
        names = [s.queue_table for s in self.settings]
        problems = {}
        if len(set(names)) != len(names):
            problems["QUEUE_TABLE"] = f"two workers of one group serve the same queue: {names}"
        ports = [s.queue_metrics_port for s in self.settings if s.queue_metrics_port is not None]
        if len(set(ports)) != len(ports):
            problems["QUEUE_METRICS_PORT"] = f"must differ between the workers of a group: {ports}"
        if problems:
            raise ConfigError(problems)

    def _build(self) -> None:
        """One pool per database, sized for its workers; then each worker's runtime."""
        self._check()
        from nsj_queue_lib.runtime.worker_runtime import spare_connections

        sizes: dict[tuple[object, ...], int] = {}
        spares: dict[tuple[object, ...], int] = {}
        for worker, settings in zip(self.workers, self.settings, strict=True):
            key = database_identity(settings)
            sizes[key] = sizes.get(key, 0) + _pool_connections(
                settings, worker.has_async_handlers()
            )
            spares[key] = spares.get(key, 0) + spare_connections(settings)
        for settings in self.settings:
            key = database_identity(settings)
            if key not in self.pools:
                self.pools[key] = make_driver(settings).make_pool(sizes[key], spare=spares[key])
        for worker, settings in zip(self.workers, self.settings, strict=True):
            pool = self.pools[database_identity(settings)]
            self.runtimes.append(worker.make_runtime(settings, pool=pool))

    def stop(self) -> None:
        """Stop every worker of the group (thread-safe, idempotent)."""
        self._stopping.set()
        for runtime in self.runtimes:
            runtime.stop()

    def run_until_stopped(self, install_signal_handlers: bool = True) -> int:
        """Run every worker until all have stopped; the process exit code."""
        from nsj_queue_lib.log import configure_logging

        configure_logging(self.settings[0])
        try:
            self._build()
        except ConfigError as exc:
            for name, why in exc.problems.items():
                print(f"nsj_queue_lib: configuration error: {name} {why}", file=sys.stderr)
            return EXIT_CONFIG_ERROR
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: self.stop())
        for pool in self.pools.values():
            pool.open(wait=False)
        threads = [
            threading.Thread(target=self._run_one, args=(i,), name=f"nsj-group-{i}", daemon=True)
            for i in range(len(self.runtimes))
        ]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(JOIN_POLL_SECONDS)
        finally:
            for pool in self.pools.values():
                try:
                    pool.close(timeout=5)
                except Exception:  # noqa: BLE001 - exiting anyway: the server drops our sessions
                    pass
        return next((code for code in self._codes if code), EXIT_OK)

    def _run_one(self, index: int) -> None:
        runtime = self.runtimes[index]
        try:
            if self._stopping.is_set():  # stopped while the others were being built
                runtime.stop()
            code = runtime.run(install_signal_handlers=False)
        except BaseException as exc:  # a crashed queue must stop the group
            # Without this the thread ended with no code: the other queues went on and the
            # process exited 0 once they stopped, so nothing restarted it.
            logger.exception("queue=%s: worker crashed", runtime.settings.queue_name)
            runtime.exit_message = f"worker crashed: {type(exc).__name__}: {exc}"
            code = EXIT_WORKER_DIED
        self._codes[index] = code
        if runtime.exit_message:
            print(f"nsj_queue_lib: {runtime.exit_message}", file=sys.stderr)
        if code != EXIT_OK:
            logger.error(
                "queue=%s: stopped with exit code %d; stopping every queue of this process",
                runtime.settings.queue_name,
                code,
            )
            self.stop()
        elif not self._stopping.is_set():
            logger.info(
                "queue=%s: stopped (HALT); the other queues of this process go on",
                runtime.settings.queue_name,
            )

    def run(self) -> None:
        """Run until stopped, then exit the process with the group's exit code."""
        code = self.run_until_stopped()
        if any(r.running_tasks() for r in self.runtimes):
            # As WorkerBase.run: a handler that ignored the grace period still runs.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        sys.exit(code)


def run_workers(workers: Sequence[WorkerBase]) -> None:
    """Run the workers of several queues in this process until SIGTERM; exits the process."""
    WorkerGroup(workers).run()
