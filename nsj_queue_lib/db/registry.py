"""What each DB_DRIVER value is, readable without a database driver installed.

The settings read this (the accepted DB_DRIVER values, the default port, the
largest commit group) when they check the environment, so it imports nothing
but the standard library: no psycopg, no PyMySQL, and none of the package's
modules (``db/driver.py`` re-exports these names; importing it from the
settings would close an import cycle through the settings it is built from).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What the database offers; the runtime picks its mechanisms from these."""

    listen_notify: bool  # wake-ups pushed by the database (else polling or the socket server)
    skip_locked: bool  # claims pass rows another transaction holds
    session_locks: bool  # advisory or named locks held by a session (liveness, services)
    asynchronous_commit: bool  # a session can commit without waiting for the disk
    # DDL runs inside a transaction (else each DDL statement commits on its own)
    transactional_ddl: bool = False
    default_port: int = 0  # DB_PORT when unset (0: not given, see DRIVER_CAPABILITIES)
    max_batch_size: int | None = None  # the database's own bound on QUEUE_BATCH_SIZE
    group_commit_by_default: bool = False  # commit groups when QUEUE_BATCH_SIZE is unset


# The accepted DB_DRIVER values and what each database offers.
DRIVER_CAPABILITIES = {
    "POSTGRES": Capabilities(
        listen_notify=True,
        skip_locked=True,
        session_locks=True,
        asynchronous_commit=True,
        transactional_ddl=True,
        default_port=5432,
        # A group's savepoints are subtransactions, of which PostgreSQL caches 64.
        max_batch_size=50,
        group_commit_by_default=True,
    ),
    "MYSQL": Capabilities(False, True, True, False, default_port=3306),
    "SINGLE_STORE": Capabilities(False, False, False, False, default_port=3306),
}
DRIVER_KEYS = tuple(DRIVER_CAPABILITIES)


def driver_capabilities(db_driver: str) -> Capabilities:
    """The capabilities of a DB_DRIVER value, in any case; ValueError naming the known ones."""
    found = DRIVER_CAPABILITIES.get(db_driver.upper())
    if found is None:
        raise ValueError(f"unknown DB_DRIVER {db_driver!r}; known: {', '.join(DRIVER_KEYS)}")
    return found
