"""A PostgreSQL DSN (libpq connection string or URL) as the DB_* variables it stands for."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict

# What a PostgreSQL DSN may say; anything else libpq reads from its PG* variables.
_LIBPQ_KEYS = {
    "host": "DB_HOST",
    "port": "DB_PORT",
    "dbname": "DB_BASE",
    "user": "DB_USER",
    "sslmode": "DB_SSLMODE",
    "sslrootcert": "DB_SSLROOTCERT",
    "sslcert": "DB_SSLCERT",
    "sslkey": "DB_SSLKEY",
    "target_session_attrs": "DB_TARGET_SESSION_ATTRS",
}


def libpq_environment(dsn: str) -> dict[str, str]:
    """A libpq conninfo string (``host=... dbname=...``) or URL (``postgresql://``)."""
    try:
        params = conninfo_to_dict(dsn.strip())
    except psycopg.Error:
        raise ValueError("not a valid libpq connection string or postgresql:// URL") from None
    unsupported = sorted(set(params) - set(_LIBPQ_KEYS) - {"password"})
    if unsupported:
        raise ValueError(
            f"unsupported in the DSN: {', '.join(unsupported)} (libpq reads such settings "
            "from its PG* environment variables, e.g. PGAPPNAME)"
        )
    if not params.get("host") or not params.get("user"):
        raise ValueError("the DSN must name the host and the user")
    params.setdefault("dbname", params["user"])
    environment = {var: str(params[key]) for key, var in _LIBPQ_KEYS.items() if params.get(key)}
    environment["DB_DRIVER"] = "POSTGRES"
    environment["DB_PASS"] = str(params.get("password") or "")
    return environment
