"""The command's configuration: the database and the queue table, nothing else.

The worker's variables are read (DB_DRIVER, DB_HOST... or DATABASE_*, DATABASE_URL or
DB_DSN, the TLS ones, QUEUE_TABLE)
through ``Settings.from_env``, but only those: a variable the command does not
use is never required nor checked. ``--dsn`` replaces every DB_* variable,
``--table`` QUEUE_TABLE.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from nsj_queue_lib.cli.errors import UsageError
from nsj_queue_lib.db.driver import driver_capabilities, get_dialect
from nsj_queue_lib.db.dsn import dsn_environment
from nsj_queue_lib.exceptions import ConfigError, InvalidIdentifierError
from nsj_queue_lib.identifiers import check_table_name, split_table_name
from nsj_queue_lib.settings import Settings

_DATABASE_VARIABLES = (
    "DB_DRIVER",
    "DATABASE_DRIVER",
    "DB_HOST",
    "DATABASE_HOST",
    "DB_PORT",
    "DATABASE_PORT",
    "DB_BASE",
    "DATABASE_NAME",
    "DB_USER",
    "DATABASE_USER",
    "DB_PASS",
    "DATABASE_PASS",
    "DATABASE_URL",
    "DB_DSN",
    "DB_SSLMODE",
    "DB_SSLROOTCERT",
    "DB_SSLCERT",
    "DB_SSLKEY",
    "DB_TARGET_SESSION_ATTRS",
)
# How the workers are woken, which ``nsjq status`` reports.
_WAKEUP_VARIABLES = ("QUEUE_WAKEUP", "CLIENT_SERVER_MODE")


@dataclasses.dataclass(frozen=True)
class Config:
    queue_table: str  # checked: ``name`` or ``schema.name``
    dialect: str  # postgres, mysql or singlestore
    settings: Settings | None  # None when the command needs no database

    def database_settings(self) -> Settings:
        if self.settings is None:  # pragma: no cover - the commands ask for what they need
            raise UsageError("this command needs the database settings")
        return self.settings

    def schema_and_name(self) -> tuple[str, str]:
        """The queue table's schema (MySQL: database) and name; the DDL needs both."""
        schema, name = split_table_name(self.queue_table)
        if schema is None:
            raise UsageError(
                f"the queue table {self.queue_table!r} must be schema.name here "
                "(QUEUE_TABLE or --table)"
            )
        return schema, name


def _environment(environ: Mapping[str, str], dsn: str | None, table: str | None) -> dict[str, str]:
    """The variables the command reads, with --dsn and --table applied."""
    wanted = {
        k: v
        for k, v in environ.items()
        if k in _DATABASE_VARIABLES or k in ("QUEUE_TABLE", *_WAKEUP_VARIABLES)
    }
    if dsn is not None:
        try:
            from_dsn = dsn_environment(dsn)
        except ValueError as exc:
            raise UsageError(f"--dsn: {exc}") from None
        wanted = {k: v for k, v in wanted.items() if k not in _DATABASE_VARIABLES}
        wanted.update(from_dsn)
    if table is not None:
        wanted["QUEUE_TABLE"] = table
    return wanted


def _checked_table(environment: Mapping[str, str]) -> str:
    table = environment.get("QUEUE_TABLE", "").strip()
    if not table:
        raise UsageError("no queue table: set QUEUE_TABLE or pass --table schema.name")
    try:
        return check_table_name(table, "queue table")
    except InvalidIdentifierError as exc:
        raise UsageError(str(exc)) from None


def load(
    environ: Mapping[str, str],
    dsn: str | None = None,
    table: str | None = None,
    database: bool = True,
    dialect: str | None = None,
) -> Config:
    """The configuration of one run; ``database``: whether it connects (else only the
    dialect and the table are needed). Raises ``UsageError``."""
    environment = _environment(environ, dsn, table)
    queue_table = _checked_table(environment)
    if not database:
        if dialect is not None:
            return Config(queue_table, dialect, None)
        driver = environment.get("DB_DRIVER") or environment.get("DATABASE_DRIVER") or ""
        try:
            driver_capabilities(driver.strip() or "POSTGRES")  # a DB_DRIVER value, or why not
            chosen = get_dialect(driver.strip() or "POSTGRES").name
        except ValueError as exc:
            raise UsageError(f"DB_DRIVER: {exc}") from None
        return Config(queue_table, chosen, None)
    # Settings wants a queue name; the command has no use for one but its table's.
    environment["QUEUE_NAME"] = split_table_name(queue_table)[1]
    try:
        settings = Settings.from_env(environment)
    except ConfigError as exc:
        hint = "" if dsn is not None else " (or pass --dsn)"
        raise UsageError(f"{exc}{hint}") from None
    return Config(queue_table, get_dialect(settings.db_driver).name, settings)
