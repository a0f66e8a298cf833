"""Maintenance services built as the worker runtime builds them, for ``run_once()`` tests.

``make_service(cls, settings)`` gives a service on the settings' driver: its
store bound to the queue (as the runtime binds it at start), new
connections from the driver, and the service's cluster-wide lock taken in the
database, or from the socket server when ``lock_client`` is given (client/server
mode; the retry service also asks it about the tasks' liveness locks).
"""

from __future__ import annotations

import threading
from typing import Any

from nsj_queue_lib.db.driver import Driver, make_driver
from nsj_queue_lib.runtime.retry import RetryService
from nsj_queue_lib.runtime.schedule import IntervalSchedule
from nsj_queue_lib.runtime.service import (
    DatabaseServiceLock,
    PeriodicService,
    ServerServiceLock,
    ServiceLock,
    service_lock_key,
)


def bound_store(driver: Driver) -> Any:
    """The driver's store of the configured queue, bound on a connection of its own."""
    store = driver.store()
    conn = driver.connect(autocommit=True)
    try:
        store.bind(conn)
    finally:
        conn.close()
    return store


def make_service(
    cls: type[PeriodicService], settings: Any, lock_client: Any = None, policies: Any = None
) -> PeriodicService:
    driver = make_driver(settings)
    store = bound_store(driver)
    stop = threading.Event()
    lock: ServiceLock
    if lock_client is not None:
        lock = ServerServiceLock(store, lock_client, cls.name, stop)
    else:
        lock = DatabaseServiceLock(
            store,
            service_lock_key(settings.queue_table, cls.name),
            lambda: driver.connect(autocommit=False),
        )
    extra: dict[str, Any] = {}
    if issubclass(cls, RetryService):
        extra = {"lock_client": lock_client, "policies": policies}
    return cls(
        settings,
        store,
        lambda: driver.connect(autocommit=cls.autocommit),
        lock,
        stop,
        IntervalSchedule(3600),
        **extra,
    )
