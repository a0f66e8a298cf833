"""Prints the DDL of a queue: ``python -m nsj_queue_lib.db_gen <schema> <queue>``.

Options: ``--dialect postgres`` (default), ``--upgrade`` (idempotent
statements that bring a queue created by nsj-queue-lib 1.2.2, or by an earlier
release of this library, to the current schema, keeping the earlier release's
claim routine), ``--drop-old-routines`` (drop the earlier releases' claim
routines once their workers are gone) and, with ``--dialect mysql``,
``--server mariadb|mysql`` (the server family the script is for; MariaDB by
default, whose script stops on MySQL before it changes anything). Anything
that is not a plain identifier exits with code 2 and a message on stderr;
nothing is printed on stdout then.
"""

from __future__ import annotations

import argparse
import sys

from nsj_queue_lib.db.dialect import DIALECT_NAMES, SERVER_FAMILIES, DdlNames
from nsj_queue_lib.db.driver import get_dialect
from nsj_queue_lib.exceptions import InvalidIdentifierError

EXIT_USAGE = 2


def check_server_option(dialect: str, server: str | None, named: str = "the {} dialect") -> None:
    """Raise ValueError when ``server`` is given for a dialect whose DDL has one variant.

    ``named`` words the dialects that have variants in the message, ``{}`` standing for
    their names: "--server applies to <named> only, not <dialect>".
    """
    if server is None or get_dialect(dialect).server_families:
        return
    variants = [name for name in DIALECT_NAMES if get_dialect(name).server_families]
    dialects = named.format(" or ".join(variants))
    raise ValueError(f"--server applies to {dialects} only, not {dialect}")


def render(
    schema: str,
    queue: str,
    dialect: str = "postgres",
    upgrade: bool = False,
    drop_old_routines: bool = False,
    server: str | None = None,
    layout: str = "plain",
) -> str:
    """The DDL text; raises InvalidIdentifierError for a bad schema or queue name.

    ``server`` (``mariadb`` or ``mysql``, the MySQL dialect only): the server family the
    script is for; None is MariaDB.
    """
    names = DdlNames(schema, queue)
    chosen = get_dialect(dialect)
    if server is not None:
        chosen = chosen.for_server(server)  # ValueError for a dialect without families
    chosen = chosen.for_layout(layout)  # ValueError for a layout the dialect lacks
    if drop_old_routines:
        text = chosen.drop_old_routines_ddl(names)
    else:
        text = chosen.upgrade_ddl(names) if upgrade else chosen.create_ddl(names)
    return text.strip() + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nsj_queue_lib.db_gen",
        description="Print the DDL of a queue table, its subscriber table, indexes and notify trigger.",
    )
    parser.add_argument("schema", help="schema of the queue (a plain identifier)")
    parser.add_argument("queue", help="queue name: the table and the notification channel")
    parser.add_argument("--dialect", default="postgres", choices=DIALECT_NAMES)
    parser.add_argument(
        "--upgrade",
        action="store_true",
        help="print idempotent statements that upgrade a queue made by nsj-queue-lib 1.2.2",
    )
    parser.add_argument(
        "--server",
        choices=SERVER_FAMILIES,
        help="with --dialect mysql: the server family the script is for (default mariadb; "
        "its script stops on MySQL before changing anything; mysql's runs on both)",
    )
    parser.add_argument(
        "--layout",
        choices=("plain", "partitioned"),
        default="plain",
        help="the queue table's layout (postgres, mysql): plain keeps every attempt in one table "
        "until the purge deletes it; partitioned keeps the unfinished ones in a hot partition "
        "and each day's finished ones in a partition that retention drops whole "
        "(docs/internals/storage.md). --upgrade needs the table's layout",
    )
    parser.add_argument(
        "--drop-old-routines",
        action="store_true",
        help="print statements that drop the claim routines of earlier releases "
        "(run once no worker of an earlier release is left)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)  # argparse itself exits with 2 on usage errors
    try:
        check_server_option(args.dialect, args.server, named="--dialect {}")
    except ValueError as exc:
        parser.error(str(exc))
    try:
        text = render(
            args.schema,
            args.queue,
            args.dialect,
            args.upgrade,
            args.drop_old_routines,
            server=args.server,
            layout=args.layout,
        )
    except InvalidIdentifierError as exc:
        print(f"db_gen: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:  # a layout the dialect lacks
        parser.error(str(exc))
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
