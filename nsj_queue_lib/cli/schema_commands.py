"""``ddl`` and ``upgrade``: what ``db_gen`` prints, or applies with ``--apply``."""

from __future__ import annotations

import argparse

from nsj_queue_lib.cli.config import Config
from nsj_queue_lib.cli.errors import EXIT_OK, UsageError
from nsj_queue_lib.cli.output import write
from nsj_queue_lib.cli.session import open_session
from nsj_queue_lib.db_gen import check_server_option, render
from nsj_queue_lib.exceptions import InvalidIdentifierError


def _script(config: Config, upgrade: bool, server: str | None = None, layout: str = "plain") -> str:
    schema, name = config.schema_and_name()
    try:
        return render(schema, name, config.dialect, upgrade=upgrade, server=server, layout=layout)
    except InvalidIdentifierError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:  # a layout the dialect lacks
        raise UsageError(str(exc)) from None


def _server(args: argparse.Namespace, config: Config) -> str | None:
    """``--server``, which only the dialects with server variants have (None: the default)."""
    server: str | None = getattr(args, "server", None)
    try:
        check_server_option(config.dialect, server)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return server


def ddl(args: argparse.Namespace, config: Config) -> int:
    return _run(args, config, upgrade=False)


def upgrade(args: argparse.Namespace, config: Config) -> int:
    return _run(args, config, upgrade=True)


def _run(args: argparse.Namespace, config: Config, upgrade: bool) -> int:
    server = _server(args, config)
    layout: str = getattr(args, "layout", None) or "plain"
    if not args.apply:
        write(_script(config, upgrade, server, layout))
        return EXIT_OK
    if upgrade and layout == "partitioned":
        return _upgrade_to_partitioned(config)
    with open_session(config, autocommit=False) as session:
        if server is None:
            # The mysql dialect's variant for the server at hand (MySQL 8 cannot run
            # MariaDB's); None for a database with one.
            server = session.driver.server_family(session.conn)
        script = _script(config, upgrade, server, layout)
        statements = session.driver.run_script(session.conn, script)
        session.conn.commit()
        atomic = session.driver.capabilities.transactional_ddl
    how = "in one transaction" if atomic else f"{statements} statements, each committed on its own"
    write(f"{'upgraded' if upgrade else 'created'} {config.queue_table} ({how})")
    return EXIT_OK


def _upgrade_to_partitioned(config: Config) -> int:
    """``upgrade --apply --layout partitioned``: a plain table is brought to this release and
    moved to the partitioned layout while its workers run (PostgreSQL,
    db/postgres/migration.py); then the partitioned layout's upgrade script runs."""
    schema, name = config.schema_and_name()
    with open_session(config, autocommit=True) as session:
        try:
            report = session.driver.move_to_partitioned(session.conn, schema, name, write)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if report is not None:
        write(f"migrated {config.queue_table} to the partitioned layout: {report}")
    with open_session(config, autocommit=False) as session:
        server = session.driver.server_family(session.conn)
        session.driver.run_script(session.conn, _script(config, True, server, "partitioned"))
        session.conn.commit()
    write(f"upgraded {config.queue_table} (partitioned layout, in one transaction)")
    return EXIT_OK
