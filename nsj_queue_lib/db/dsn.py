"""DATABASE_URL / DB_DSN: the DB_* variables a connection string stands for, and back.

``dsn_environment`` reads a DSN (a libpq connection string or URL for
PostgreSQL, ``mysql://`` with query options for MySQL/MariaDB) into the
variables ``Settings.from_env`` reads, for workers, the socket server and
``nsjq --dsn``; ``masked_url`` writes settings back as a URL whose password
is masked, for the start-up line of the logs. Errors never repeat the DSN: it
may hold a password.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping

from nsj_queue_lib.db.driver import driver_class, dsn_schemes, url_scheme

# A MySQL URL's query options: name -> variable (libpq's names, MySQL's client names).
_URL_OPTIONS = {
    **{name: "DB_SSLMODE" for name in ("sslmode", "ssl-mode", "ssl_mode")},
    **{name: "DB_SSLROOTCERT" for name in ("sslrootcert", "ssl-ca", "ssl_ca")},
    **{name: "DB_SSLCERT" for name in ("sslcert", "ssl-cert", "ssl_cert")},
    **{name: "DB_SSLKEY" for name in ("sslkey", "ssl-key", "ssl_key")},
}
# MySQL's --ssl-mode words, as the libpq words DB_SSLMODE takes.
_MYSQL_SSL_MODES = {
    "disabled": "disable",
    "preferred": "prefer",
    "required": "require",
    "verify_ca": "verify-ca",
    "verify_identity": "verify-full",
}


def dsn_environment(dsn: str) -> dict[str, str]:
    """The DB_* variables (DB_DRIVER and DB_PASS included) of a DSN. Raises ``ValueError``."""
    scheme, found, _ = dsn.strip().partition("://")
    schemes = dsn_schemes()  # a DSN without a scheme is a libpq conninfo string
    driver = schemes.get(scheme.lower()) if found else "POSTGRES"
    if driver is None:
        known = ", ".join(f"{name}://" for name in schemes)
        raise ValueError(f"unknown DSN scheme {scheme!r}: expected {known} or a libpq string")
    own = driver_class(driver).read_dsn(dsn)  # the database's own syntax (libpq's)
    return _url_environment(dsn, driver) if own is None else own


def dsn_variables(dsn: str) -> dict[str, str]:
    """The DB_* variables ``dsn`` sets (a DSN without a password sets no DB_PASS)."""
    return {name: value for name, value in dsn_environment(dsn).items() if value != ""}


def _url_environment(dsn: str, driver: str) -> dict[str, str]:
    """``scheme://user:password@host:port/database?sslmode=...``."""
    parts = urllib.parse.urlsplit(dsn.strip())
    try:
        port = parts.port
    except ValueError:
        raise ValueError("the DSN's port is not a number from 1 to 65535") from None
    database = urllib.parse.unquote(parts.path.lstrip("/"))
    if not parts.hostname or not parts.username or not database or "/" in database:
        raise ValueError(
            f"expected {parts.scheme}://user:password@host:port/database "
            "(user, host and database are required)"
        )
    if parts.fragment:
        raise ValueError("the DSN takes no fragment (nothing after '#')")
    environment = {
        "DB_DRIVER": driver,
        "DB_HOST": parts.hostname,
        "DB_BASE": database,
        "DB_USER": urllib.parse.unquote(parts.username),
        "DB_PASS": urllib.parse.unquote(parts.password or ""),
        **_url_options(parts.query),
    }
    if port is not None:
        environment["DB_PORT"] = str(port)
    return environment


def _url_options(query: str) -> dict[str, str]:
    """The variables of a URL's ``?sslmode=...&ssl-ca=...`` options."""
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError("the DSN's options (after '?') are not name=value pairs") from None
    variables: dict[str, str] = {}
    for name, value in pairs:
        variable = _URL_OPTIONS.get(name.lower())
        if variable is None:
            known = ", ".join(sorted(_URL_OPTIONS))
            raise ValueError(f"unknown option {name!r} in the DSN; known: {known}")
        if variable == "DB_SSLMODE":
            value = _MYSQL_SSL_MODES.get(value.lower(), value.lower())
        variables[variable] = value
    return variables


def masked_url(
    driver: str,
    user: str,
    has_password: bool,
    hosts: list[str],
    port: int | tuple[int, ...],
    database: str,
    options: Mapping[str, str | None],
) -> str:
    """``scheme://user:***@host:port/database?sslmode=...``: a connection for the logs.

    A PostgreSQL unix-socket directory (a host starting with ``/`` or ``@``) cannot be
    written plainly as a URL's host, so the hosts and ports go into the query as libpq
    reads them: ``postgresql://user:***@/database?host=/run/postgresql&port=5432``. Paths
    (socket directories, certificates) are shown as they are, not percent-encoded: the
    line is for people to read, and stays a URL libpq accepts.
    """
    quote = urllib.parse.quote
    ports = port_text(port).split(",")
    pairs = [(key, value) for key, value in options.items() if value]
    if any(_is_socket_directory(host) for host in hosts):
        netloc = ""
        pairs = [("host", ",".join(hosts)), ("port", ",".join(ports)), *pairs]
    else:
        if len(ports) == 1:
            ports = ports * len(hosts)
        netloc = ",".join(
            f"{quote(host, safe='')}:{p}" for host, p in zip(hosts, ports, strict=False)
        )
    query = urllib.parse.urlencode(pairs, safe="/,")
    secret = ":***" if has_password else ""
    url = f"{url_scheme(driver) or 'db'}://{quote(user, safe='')}{secret}@{netloc}/"
    return url + quote(database, safe="") + (f"?{query}" if query else "")


def _is_socket_directory(host: str) -> bool:
    """libpq's rule: a host starting with a slash (or ``@``, Linux's abstract namespace) names
    the directory of a unix socket, not a machine."""
    return host.startswith(("/", "@"))


def port_text(port: int | tuple[int, ...]) -> str:
    """DB_PORT as libpq takes it: one port, or one per host, comma-separated."""
    return ",".join(str(p) for p in port) if isinstance(port, tuple) else str(port)
