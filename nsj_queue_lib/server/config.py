"""What the socket server needs from the settings, and where it may listen.

Secure by default: without ``QUEUE_SERVER_TOKEN`` the server listens on the
loopback interface only, whatever ``QUEUE_SERVER_BIND`` asks for. With a
token it listens where ``QUEUE_SERVER_BIND`` says (default ``0.0.0.0``, every
IPv4 interface, so that workers on other hosts can reach it).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping

from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.settings import Settings

LOOPBACK = "127.0.0.1"
DEFAULT_BIND_WITH_TOKEN = "0.0.0.0"
BIND_VARIABLE = "QUEUE_SERVER_BIND"
# Tokens shorter than this are accepted, with a warning.
RECOMMENDED_TOKEN_LENGTH = 16


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    settings: Settings
    bind_host: str
    notify_port: int
    lock_port: int
    token: str | None = dataclasses.field(default=None, repr=False)
    max_clients: int = 50
    message_timeout: float = 5.0
    keepalive_idle: float = 30.0
    check_tasks_interval: float = 15.0
    warnings: tuple[str, ...] = ()

    @property
    def queue_name(self) -> str:
        return self.settings.queue_name

    @classmethod
    def from_settings(
        cls, settings: Settings, environ: Mapping[str, str] | None = None
    ) -> ServerConfig:
        requested = settings.queue_server_bind
        if requested is None and environ is not None:  # settings built without the variable
            requested = (environ.get(BIND_VARIABLE) or "").strip() or None
        token = settings.queue_server_token
        bind_host, warnings = resolve_bind_host(requested, token)
        if token is not None and len(token) < RECOMMENDED_TOKEN_LENGTH:
            warnings.append(
                f"QUEUE_SERVER_TOKEN is shorter than {RECOMMENDED_TOKEN_LENGTH} characters; "
                "use a long random secret (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        return cls(
            settings=settings,
            bind_host=bind_host,
            notify_port=settings.notify_service_port,
            lock_port=settings.lock_service_port,
            token=token,
            max_clients=settings.max_client_threads,
            message_timeout=settings.timeout_socket_message,
            keepalive_idle=settings.lock_service_wait_conn_interval,
            check_tasks_interval=settings.check_tasks_interval,
            warnings=tuple(warnings),
        )


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_bind_host(requested: str | None, token: str | None) -> tuple[str, list[str]]:
    """(address to bind, warnings). Raises ConfigError for an address that is not an IP literal."""
    warnings: list[str] = []
    if requested is not None and requested.lower() != "localhost":
        try:
            ipaddress.ip_address(requested)
        except ValueError:
            raise ConfigError(
                {
                    BIND_VARIABLE: f"must be an IP address (e.g. 0.0.0.0, 127.0.0.1, ::), got {requested!r}"
                }
            ) from None
    if token is None:
        if requested is not None and not is_loopback(requested):
            warnings.append(
                f"{BIND_VARIABLE}={requested} ignored: without QUEUE_SERVER_TOKEN the server "
                f"listens on {LOOPBACK} only"
            )
            return LOOPBACK, warnings
        return requested or LOOPBACK, warnings
    return requested or DEFAULT_BIND_WITH_TOKEN, warnings
