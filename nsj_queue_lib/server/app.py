"""Entry point of ``python -m nsj_queue_lib.server``.

``python -m nsj_queue_lib.server`` runs the server until SIGTERM/SIGINT or an
authenticated ``halt`` request (exit code 0). A configuration error exits 2
with the bad variables on stderr; a port that cannot be bound exits 1.

``python -m nsj_queue_lib.server halt`` asks a running server to stop: it
connects to ``SERVER_HOST``:``LOCK_SERVICE_PORT`` with ``QUEUE_SERVER_TOKEN``
(needs only those variables).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.settings import Settings

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG_ERROR = 2

USAGE = """usage: python -m nsj_queue_lib.server [halt]

Runs the nsj_queue_lib lock/notify socket server with settings from the
environment (see docs/how-to/socket-server.md).
  halt   ask the server at SERVER_HOST:LOCK_SERVICE_PORT to stop (needs QUEUE_SERVER_TOKEN)
"""

# ``halt`` needs no database or queue: placeholders satisfy the settings
# checks for the variables it never uses.
_HALT_PLACEHOLDERS = {
    "DB_HOST": "unused",
    "DB_BASE": "unused",
    "DB_USER": "unused",
    "QUEUE_NAME": "unused",
    "QUEUE_TABLE": "unused",
}


def _config_error(exc: ConfigError) -> int:
    for name, why in exc.problems.items():
        print(f"nsj_queue_lib.server: configuration error: {name} {why}", file=sys.stderr)
    print(
        f"nsj_queue_lib.server: invalid configuration: {', '.join(exc.problems)}", file=sys.stderr
    )
    return EXIT_CONFIG_ERROR


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    if argv and argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return EXIT_OK
    if argv == ["halt"]:
        return halt_command(environ)
    if argv:
        print(USAGE, end="", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    return serve(environ)


def serve(environ: Mapping[str, str]) -> int:
    from nsj_queue_lib.db.driver import make_driver
    from nsj_queue_lib.log import configure_logging
    from nsj_queue_lib.server.config import ServerConfig
    from nsj_queue_lib.server.loop import QueueServer

    try:
        settings = Settings.from_env(environ)
        config = ServerConfig.from_settings(settings, environ)
    except ConfigError as exc:
        return _config_error(exc)
    configure_logging(settings)
    log = logging.getLogger("nsj_queue_lib.server")
    driver = make_driver(settings)
    log.info("queue=%s: database %s", settings.queue_name, settings.masked_dsn())
    server = QueueServer(config, source_factory=driver.task_source, logger=log)
    try:
        server.start()
    except OSError as exc:
        log.error("cannot listen on %s: %s", config.bind_host, exc)
        print(
            f"nsj_queue_lib.server: cannot listen on {config.bind_host} "
            f"(NOTIFY_SERVICE_PORT={config.notify_port}, LOCK_SERVICE_PORT={config.lock_port}): {exc}",
            file=sys.stderr,
        )
        return EXIT_FAILURE

    def on_signal(signum, frame):
        server.stop(f"signal {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.serve_forever()
    return EXIT_OK


def halt_command(environ: Mapping[str, str]) -> int:
    from nsj_queue_lib.client import LockClient, ServerConnectionError, ServerRequestError

    try:
        settings = Settings.from_env({**_HALT_PLACEHOLDERS, **environ})
    except ConfigError as exc:
        return _config_error(exc)
    try:
        with LockClient.from_settings(settings, client_name="halt-command") as client:
            client.halt()
    except (ServerConnectionError, ServerRequestError) as exc:
        print(f"nsj_queue_lib.server: halt failed: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    print(
        f"nsj_queue_lib.server: the server at {settings.server_host}:{settings.lock_service_port} is stopping"
    )
    return EXIT_OK
