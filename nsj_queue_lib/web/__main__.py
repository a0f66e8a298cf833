"""``python -m nsj_queue_lib.web`` (and ``nsjq web``): serve the API and the console."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from nsj_queue_lib.exceptions import ConfigError

EXIT_USAGE = 2


def build_parser(prog: str = "python -m nsj_queue_lib.web") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve the HTTP API v1 and the console of the queues QUEUE_WEB_QUEUES "
        "(or QUEUE_TABLE) of the database the DB_* variables name (docs/web.md).",
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dsn", help="the database instead of the DB_* variables")
    parser.add_argument("--host", help="address to listen on (QUEUE_WEB_HOST)")
    parser.add_argument("--port", type=int, help="port to listen on (QUEUE_WEB_PORT)")


def serve(args: argparse.Namespace) -> int:
    """Run the server until it is stopped; 2 on a configuration problem."""
    try:
        import uvicorn

        from nsj_queue_lib.web.app import create_app
        from nsj_queue_lib.web.settings import HOST, PORT, WebSettings
    except ImportError as exc:
        print(
            f"nsjq web needs the web extra (pip install 'nsj-queue-lib[web]'): {exc}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    environ = dict(os.environ)
    if args.host:
        environ[HOST] = args.host
    if args.port is not None:
        environ[PORT] = str(args.port)
    try:
        settings = WebSettings.from_env(environ, dsn=args.dsn)
    except ConfigError as exc:
        print(f"nsjq web: {exc}", file=sys.stderr)
        return EXIT_USAGE
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="info",
        server_header=False,
        proxy_headers=False,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return serve(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
