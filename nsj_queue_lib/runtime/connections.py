"""Opening PostgreSQL connections and the executors' pool."""

from __future__ import annotations

import psycopg
from psycopg_pool import ConnectionPool

from nsj_queue_lib.settings import Settings

# Dead peers are found by TCP keepalive in about 20 s instead of hanging on a
# LISTEN connection forever.
_KEEPALIVE = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 2}
CONNECT_TIMEOUT_SECONDS = 5


def connect(settings: Settings, autocommit: bool) -> psycopg.Connection:
    return psycopg.connect(
        settings.postgres_conninfo(),
        autocommit=autocommit,
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        **_KEEPALIVE,
    )


def make_pool(settings: Settings, size: int) -> ConnectionPool:
    """One connection per executor slot plus one for recording failures.

    Autocommit: the executor opens and closes transactions with explicit
    statements (see PostgresQueueStore.claim).
    """
    return ConnectionPool(
        settings.postgres_conninfo(),
        min_size=size,
        max_size=size + 1,
        kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_SECONDS, **_KEEPALIVE},
        name=f"nsj_queue_lib:{settings.queue_name}",
        timeout=CONNECT_TIMEOUT_SECONDS * 2,
        open=False,
    )
