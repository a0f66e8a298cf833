"""THE place that lists and supervises a worker's threads around one stop event.

Threads: the dispatcher (knows when there is work: LISTEN, polling or the
socket server, and wakes the executors), the executor threads of the
``TaskExecutor`` (each claims and runs its own tasks), and the retry, renotify
and purge services.
Stopping (signal, HALT, ``stop()``): no new claims; in-flight tasks get
QUEUE_GRACE_PERIOD seconds; any still running are released for a new attempt;
exit code 0. If the dispatcher dies of an unexpected error the runtime stops
and returns a non-zero exit code rather than idling forever.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nsj_queue_lib.db.dialect import get_dialect
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.notify.polling import PollingListener
from nsj_queue_lib.runtime.connections import connect, make_pool
from nsj_queue_lib.runtime.dispatcher import Dispatcher, QueueTableMissing
from nsj_queue_lib.runtime.executor import TaskExecutor, TaskHandler
from nsj_queue_lib.runtime.purge import PurgeService
from nsj_queue_lib.runtime.renotify import RenotifyService
from nsj_queue_lib.runtime.retry import RetryService
from nsj_queue_lib.runtime.schedule import make_schedule
from nsj_queue_lib.settings import Settings

if TYPE_CHECKING:
    from nsj_queue_lib.client.lock_client import LockClient
    from nsj_queue_lib.notify.server_listener import ServerListener
    from nsj_queue_lib.runtime.liveness import ServerLiveness

logger = get_logger("runtime")

EXIT_OK = 0
EXIT_CONFIG_ERROR = 2
EXIT_DISPATCHER_DIED = 3
SUPERVISE_INTERVAL_SECONDS = 0.5


def _executor_configure(settings: Settings, configure: Callable[[object], None] | None):
    """What runs once on each executor connection (the ones the tasks' transactions use)."""
    if settings.queue_synchronous_commit:
        return configure

    def asynchronous_commits(conn) -> None:
        if configure is not None:
            configure(conn)
        conn.execute("SET synchronous_commit = off")  # autocommit: for the whole session

    return asynchronous_commits


class WorkerRuntime:
    executor: TaskExecutor  # the server liveness reads it through a closure made first

    def __init__(self, settings: Settings, handler: TaskHandler):
        if settings.db_driver == "SINGLE_STORE" and not settings.client_server_mode:
            raise ConfigError(
                {
                    "CLIENT_SERVER_MODE": "must be true with DB_DRIVER=SINGLE_STORE: SingleStore has no "
                    "named locks nor LISTEN, the socket server provides them (python -m nsj_queue_lib.server)",
                }
            )
        if not settings.queue_synchronous_commit and settings.db_driver != "POSTGRES":
            raise ConfigError(
                {
                    "QUEUE_SYNCHRONOUS_COMMIT": "can be false on PostgreSQL only (on MySQL the equivalent, "
                    "innodb_flush_log_at_trx_commit, is a server setting)",
                }
            )
        self.settings = settings
        self.stop_event = threading.Event()
        self.store = get_dialect(settings.db_driver).store(
            settings.queue_table, settings.queue_subscriber_table
        )
        postgres = settings.db_driver == "POSTGRES"
        configure = None if postgres else self.store.configure_connection
        configure_executor = None if postgres else self.store.configure_executor_connection
        self._connect: Callable[[bool], Any] = lambda autocommit: connect(
            settings, autocommit, configure
        )
        self.pool = make_pool(
            settings, settings.queue_concurrency, _executor_configure(settings, configure_executor)
        )
        self.lock_client: LockClient | None = None
        liveness: ServerLiveness | None = None
        listener: PollingListener | ServerListener | None = (
            None if postgres else PollingListener(settings.queue_poll_interval)
        )
        if settings.client_server_mode:
            # Wake-ups and every lock come from the socket server; nothing from
            # LISTEN or advisory locks.
            from nsj_queue_lib.client.lock_client import LockClient
            from nsj_queue_lib.notify.server_listener import ServerListener
            from nsj_queue_lib.runtime.liveness import ServerLiveness

            name = f"{settings.queue_name}:{socket.gethostname()}:{os.getpid()}:locks"
            self.lock_client = LockClient.from_settings(settings, name, connect=False)
            liveness = ServerLiveness(
                self.store, self.lock_client, lambda: self.executor._queue_oid(), self.stop_event
            )
            listener = ServerListener(settings)
        self.executor = TaskExecutor(
            settings, self.store, self.pool, handler, self.stop_event, liveness
        )
        self.dispatcher = Dispatcher(
            settings,
            self.store,
            self.executor,
            self._connect,
            self.stop_event,
            on_halt=self.stop,
            on_reconnect=self._refresh_pool,
            listener=listener,
        )

        def service(cls, minutes, interval):
            return cls(
                settings,
                self.store,
                self._connect,
                self.stop_event,
                make_schedule(minutes, interval),
                lock_client=self.lock_client,
            )

        self.services = [
            service(
                RetryService,
                settings.queue_minute_retry_thread,
                settings.queue_retry_thread_interval,
            ),
            service(
                RenotifyService,
                settings.queue_minute_notify_thread,
                settings.queue_notify_thread_interval,
            ),
            service(
                PurgeService,
                settings.queue_minute_purge_thread,
                settings.queue_purge_thread_interval,
            ),
        ]
        self._dispatcher_error: BaseException | None = None
        self.exit_message: str | None = None

    def stop(self) -> None:
        """Ask the worker to stop (thread-safe, idempotent)."""
        self.stop_event.set()
        self.dispatcher.interrupt()
        self.executor.interrupt()

    def _refresh_pool(self) -> None:
        # After an outage every idle pooled connection is dead: replace them now
        # instead of letting the next tasks find out one by one.
        try:
            self.pool.check()
        except Exception as exc:  # noqa: BLE001 - best effort: broken connections are replaced on use
            logger.info("queue=%s: pool check failed: %s", self.settings.queue_name, exc)
        if self.lock_client is not None:
            # The socket server may have restarted: take the running tasks'
            # locks again now, not when each task next talks to the server.
            from nsj_queue_lib.client.channel import ServerConnectionError

            try:
                self.lock_client.ping()
            except ServerConnectionError:
                self.lock_client.reconnect(stop=self.stop_event, max_wait=30)

    def _run_dispatcher(self) -> None:
        try:
            if self.lock_client is not None and not self.lock_client.reconnect(
                stop=self.stop_event
            ):
                return  # stopped before the lock server answered
            self.dispatcher.run()
        except QueueTableMissing as exc:
            self._dispatcher_error = exc
            self.exit_message = str(exc)
            logger.error("queue=%s: %s", self.settings.queue_name, exc)
        except BaseException as exc:  # reported by the supervisor
            self._dispatcher_error = exc
            logger.exception("queue=%s: dispatcher died", self.settings.queue_name)

    def run(self, install_signal_handlers: bool = True) -> int:
        """Run until stopped; returns the process exit code."""
        s = self.settings
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: self.stop())
        logger.info(
            "queue=%s table=%s: worker starting (concurrency=%d)",
            s.queue_name,
            s.queue_table,
            s.queue_concurrency,
        )
        self.pool.open(wait=False)
        dispatcher = threading.Thread(
            target=self._run_dispatcher, name="nsj-dispatcher", daemon=True
        )
        service_threads = [
            threading.Thread(target=svc.run, name=f"nsj-{svc.name}", daemon=True)
            for svc in self.services
        ]
        self.executor.start()
        dispatcher.start()
        for thread in service_threads:
            thread.start()

        while not self.stop_event.is_set():
            if not dispatcher.is_alive():
                break
            self.stop_event.wait(SUPERVISE_INTERVAL_SECONDS)
        died = not self.stop_event.is_set() or self._dispatcher_error is not None
        self.stop()
        dispatcher.join(timeout=10)

        if isinstance(self._dispatcher_error, QueueTableMissing):
            code = EXIT_CONFIG_ERROR
        else:
            code = EXIT_DISPATCHER_DIED if died else EXIT_OK
        logger.info(
            "queue=%s: stopping; waiting up to %.0f s for %d running task(s)",
            s.queue_name,
            s.queue_grace_period,
            len(self.executor.running_tasks()),
        )
        if not self.executor.wait_idle(s.queue_grace_period):
            try:
                released = self.executor.release_running(lambda: self._connect(True))
                logger.warning(
                    "queue=%s: released %d task(s) still running after the grace period",
                    s.queue_name,
                    released,
                )
            except Exception as exc:  # noqa: BLE001 - best effort: the retry service rescues the tasks
                logger.warning(
                    "queue=%s: could not release running tasks (%s); the retry service will "
                    "rescue them",
                    s.queue_name,
                    exc,
                )
        self.executor.join(timeout=1)
        for thread in service_threads:
            thread.join(timeout=5)
        try:
            self.pool.close(timeout=5)
        except Exception:  # noqa: BLE001 - exiting anyway: the server drops our sessions
            pass
        if self.lock_client is not None:
            self.lock_client.close()
        logger.info("queue=%s: worker stopped (exit code %d)", s.queue_name, code)
        return code
