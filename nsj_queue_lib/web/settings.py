"""The web server's settings: the queues it serves, its tokens, where it listens.

Built once at start-up from the environment (``WebSettings.from_env``); the
database comes from the workers' variables through ``nsjq``'s configuration
(``cli.config.load``: DB_*, DATABASE_URL or DB_DSN, or ``--dsn``). Importing
this module reads nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from nsj_queue_lib.cli import config as cli_config
from nsj_queue_lib.cli.errors import UsageError
from nsj_queue_lib.exceptions import ConfigError, InvalidIdentifierError
from nsj_queue_lib.identifiers import check_table_name
from nsj_queue_lib.server.config import is_loopback
from nsj_queue_lib.settings import Settings

TOKEN = "QUEUE_WEB_TOKEN"
READONLY_TOKEN = "QUEUE_WEB_READONLY_TOKEN"
QUEUES = "QUEUE_WEB_QUEUES"
HOST = "QUEUE_WEB_HOST"
PORT = "QUEUE_WEB_PORT"
MAX_BODY = "QUEUE_WEB_MAX_BODY"

LOOPBACK = "127.0.0.1"
DEFAULT_HOST_WITH_TOKEN = "0.0.0.0"
DEFAULT_PORT = 8080
DEFAULT_MAX_BODY = 1024 * 1024
# A token shorter than this is a password someone typed, not a secret.
MIN_TOKEN_LENGTH = 16


@dataclasses.dataclass(frozen=True)
class WebSettings:
    database: Settings
    queues: tuple[str, ...]  # checked table names; the first is the default queue
    token: str | None  # full access (enqueue, cancel, retry)
    readonly_token: str | None  # reads only
    host: str
    port: int
    max_body_bytes: int  # a request body above this is refused with 413

    @property
    def auth_required(self) -> bool:
        return self.token is not None or self.readonly_token is not None

    @classmethod
    def from_env(cls, environ: Mapping[str, str], dsn: str | None = None) -> WebSettings:
        """Raise ``ConfigError`` naming every bad variable."""
        problems: dict[str, str] = {}
        queues = _queues(environ, problems)
        tokens = {name: _token(environ, name, problems) for name in (TOKEN, READONLY_TOKEN)}
        port = _int(environ, PORT, DEFAULT_PORT, 0, 65535, problems)
        max_body = _int(environ, MAX_BODY, DEFAULT_MAX_BODY, 1024, 64 * 1024 * 1024, problems)
        protected = any(tokens.values())
        host = environ.get(HOST, "").strip() or (DEFAULT_HOST_WITH_TOKEN if protected else LOOPBACK)
        if not protected and not is_loopback(host):
            problems[HOST] = f"{host} needs {TOKEN}: without a token the console is loopback only"
        database = None
        if queues:
            try:
                database = cli_config.load(environ, dsn=dsn, table=queues[0]).database_settings()
            except UsageError as exc:
                problems["database"] = str(exc)
        if problems or database is None:
            raise ConfigError(problems)
        return cls(
            database=database,
            queues=queues,
            token=tokens[TOKEN],
            readonly_token=tokens[READONLY_TOKEN],
            host=host,
            port=port,
            max_body_bytes=max_body,
        )


def _queues(environ: Mapping[str, str], problems: dict[str, str]) -> tuple[str, ...]:
    """QUEUE_WEB_QUEUES (comma-separated schema.table names), else QUEUE_TABLE."""
    variable = QUEUES if environ.get(QUEUES, "").strip() else "QUEUE_TABLE"
    names = [n.strip() for n in environ.get(variable, "").split(",") if n.strip()]
    if not names:
        problems[QUEUES] = "no queue: set QUEUE_WEB_QUEUES (schema.table,...) or QUEUE_TABLE"
        return ()
    try:
        checked = [check_table_name(name, "queue table") for name in names]
    except InvalidIdentifierError as exc:
        problems[variable] = str(exc)
        return ()
    return tuple(dict.fromkeys(checked))


def _token(environ: Mapping[str, str], name: str, problems: dict[str, str]) -> str | None:
    value = environ.get(name, "").strip()
    if not value:
        return None
    if len(value) < MIN_TOKEN_LENGTH:
        problems[name] = f"must be at least {MIN_TOKEN_LENGTH} characters long"
    return value


def _int(
    environ: Mapping[str, str],
    name: str,
    default: int,
    low: int,
    high: int,
    problems: dict[str, str],
) -> int:
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        problems[name] = f"must be a whole number, got {text!r}"
        return default
    if not low <= value <= high:
        problems[name] = f"must be between {low} and {high}, got {value}"
    return value
