"""A connection to the configured database and the queue's inspection store, for one command."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from nsj_queue_lib.cli.config import Config
from nsj_queue_lib.db.driver import Driver, close_quietly, make_driver
from nsj_queue_lib.db.queue_store import InspectionStore


@dataclasses.dataclass(frozen=True)
class Session:
    driver: Driver
    conn: Any
    store: InspectionStore


@contextlib.contextmanager
def open_session(config: Config, autocommit: bool = True) -> Iterator[Session]:
    """The driver's connection (``autocommit`` False: one transaction, which the command
    commits), closed at the end; a transaction left open is rolled back by the server."""
    driver = make_driver(config.database_settings())
    conn = driver.connect(autocommit=autocommit)
    try:
        yield Session(driver, conn, driver.inspection_store())
    finally:
        close_quietly(conn)
