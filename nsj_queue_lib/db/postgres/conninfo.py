"""The libpq connection string of a worker's settings (was ``Settings.postgres_conninfo``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from psycopg.conninfo import make_conninfo

from nsj_queue_lib.db.dsn import port_text

if TYPE_CHECKING:
    from nsj_queue_lib.settings import Settings


def conninfo(settings: Settings) -> str:
    """libpq connection string for these settings."""
    return make_conninfo(
        host=settings.db_host,
        port=port_text(settings.db_port),
        dbname=settings.db_name,
        user=settings.db_user,
        password=settings.db_pass or None,
        application_name=f"nsj_queue_lib:{settings.queue_name}"[:63],
        sslmode=settings.db_sslmode,
        sslrootcert=settings.db_sslrootcert,
        sslcert=settings.db_sslcert,
        sslkey=settings.db_sslkey,
        target_session_attrs=settings.db_target_session_attrs,
    )
