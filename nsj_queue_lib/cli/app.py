"""``nsjq``: the arguments, the commands, the exit codes."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from nsj_queue_lib.cli import config as cli_config
from nsj_queue_lib.cli import health_command
from nsj_queue_lib.cli.commands import (
    breaker_reset,
    cancel,
    ddl,
    parse_time,
    parse_until,
    pause,
    process,
    resume,
    retry,
    show,
    status,
    tasks,
    upgrade,
    workflow,
)
from nsj_queue_lib.cli.errors import EXIT_NOTHING, EXIT_USAGE, NothingToDo, UsageError
from nsj_queue_lib.db.dialect import DIALECT_NAMES, SERVER_FAMILIES
from nsj_queue_lib.exceptions import ConfigError, DatabaseError

PROG = "nsjq"
# The exit code where the output could not be written out (Python's own at exit).
EXIT_UNFLUSHED = 120
MAX_PAGE_SIZE = 1000
Command = Callable[[argparse.Namespace, cli_config.Config], int]
# Adds one command's parser to nsjq's subcommands.
CommandParser = Callable[["argparse._SubParsersAction[_Parser]"], None]

_DESCRIPTION = """\
Look at a queue and operate it. The database and the queue table come from the
workers' variables (DB_DRIVER, DB_HOST, DB_PORT, DB_BASE, DB_USER, DB_PASS or
DATABASE_*; QUEUE_TABLE) or from --dsn and --table.
Exit codes: 0 done, 1 not found or nothing to do, 2 bad usage or configuration
(or the database could not be reached)."""


class _Parser(argparse.ArgumentParser):
    """Usage errors become ``UsageError``: one line on stderr, exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _version() -> str:
    # Imported here: importlib.metadata costs every command's start-up some 50 ms.
    from importlib import metadata

    try:
        return metadata.version("nsj-queue-lib")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "unknown"


class _VersionAction(argparse.Action):
    """--version: the installed version, looked up only when asked."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"{PROG} {_version()}")
        parser.exit()


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _page_size(text: str) -> int:
    value = _positive(text)
    if value > MAX_PAGE_SIZE:
        raise argparse.ArgumentTypeError(f"at most {MAX_PAGE_SIZE}, got {value}")
    return value


def _common(suppress: bool) -> _Parser:
    """--dsn, --table and --json, accepted before and after the command."""
    default = argparse.SUPPRESS if suppress else None
    common = _Parser(add_help=False)
    common.add_argument(
        "--dsn",
        default=default,
        help="the database instead of the DB_* variables: a libpq string or postgresql:// URL, "
        "or mysql://user:password@host:port/database",
    )
    common.add_argument(
        "--table", default=default, help="the queue table, schema.name (instead of QUEUE_TABLE)"
    )
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="print one JSON document instead of tables",
    )
    return common


def _add(
    commands: argparse._SubParsersAction[_Parser],
    name: str,
    run: Command,
    help_text: str,
    database: bool = True,
) -> argparse.ArgumentParser:
    sub = commands.add_parser(name, help=help_text, description=help_text, parents=[_common(True)])
    sub.set_defaults(run=run, database=database)
    return sub


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or, when ``argv`` names one command and asks for no
    help, of that command alone: building all of them is some 8 ms of every ``nsjq``
    run, a tenth of what ``nsjq status`` adds to the driver's import and connection."""
    parser = _Parser(
        prog=PROG,
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common(False)],
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="print the version")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = _named_command(argv)
    for name, add in _COMMANDS.items():
        if named is None or name == named:
            add(commands)
    return parser


def _named_command(argv: Sequence[str] | None) -> str | None:
    """The command ``argv`` runs, where that is certain: its first word that is not an
    option nor --dsn's or --table's value; None with a help or version option."""
    words = list(sys.argv[1:] if argv is None else argv)
    for word in words:
        if word in ("-h", "--help", "--version"):
            return None
    after_value_option = False
    for word in words:
        if after_value_option:
            after_value_option = False
        elif word in ("--dsn", "--table"):
            after_value_option = True
        elif not word.startswith("-"):
            return word if word in _COMMANDS else None
    return None


def _status_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = _add(commands, "status", status, "tasks per processo and status, the running ones")
    sub.add_argument("--limit", type=_page_size, default=20, help="running tasks shown (20)")


def _tasks_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = _add(commands, "tasks", tasks, "list tasks (their latest attempt), newest first")
    sub.add_argument("--status", action="append", help="only these statuses (a,b or repeated)")
    sub.add_argument("--processo", help="only this processo")
    sub.add_argument("--chave-externa", dest="chave_externa", help="only this chave_externa")
    sub.add_argument("--since", type=parse_time, help="first due at or after: 30m, 2h, 1d, ISO")
    sub.add_argument("--until", type=parse_time, help="first due before: 30m, 2h, 1d, ISO")
    sub.add_argument(
        "--all-attempts", action="store_true", help="every attempt, not only the latest"
    )
    sub.add_argument("--limit", type=_page_size, default=50, help="tasks per page (50)")
    sub.add_argument("--page", type=_positive, default=1, help="page number, from 1")


def _show_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = _add(commands, "show", show, "every attempt of a task, and its dead letter")
    sub.add_argument("id", type=_positive, help="the id of any attempt of the task")


def _workflow_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = _add(
        commands, "workflow", workflow, "a workflow's status and its tasks with their parents"
    )
    sub.add_argument("id", type=_positive, help="the workflow's id (Workflow.enqueue's)")
    sub.add_argument(
        "--cancel",
        action="store_true",
        help="first cancel its unfinished tasks (waiting ones; running ones are asked to stop)",
    )


def _process_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = _add(commands, "process", process, "a process instance: state, timer, tasks and events")
    sub.add_argument("id", help="the process's id (start_process's process_id)")
    sub.add_argument("--tasks", type=_page_size, default=20, help="its last tasks shown (20)")
    sub.add_argument("--events", type=_page_size, default=20, help="its last events shown (20)")


def _retry_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = _add(
        commands,
        "retry",
        retry,
        "a new attempt, due now, for a task that ran out of attempts (one transaction)",
    )
    sub.add_argument("id", type=_positive, help="the id of any attempt of the task")


def _cancel_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = _add(
        commands,
        "cancel",
        cancel,
        "cancel a task: a waiting one becomes cancelada, a running one is asked to stop",
    )
    sub.add_argument("id", type=_positive, help="the id of any attempt of the task")


def _pause_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = _add(
        commands,
        "pause",
        pause,
        "pause the queue, or one processo, across every worker (running tasks finish)",
    )
    sub.add_argument("processo", nargs="?", help="only this processo (default: the whole queue)")
    sub.add_argument(
        "--until",
        type=parse_until,
        help="resume by itself then: ISO 8601 (UTC unless stated) or 30m, 2h, 1d from now",
    )


def _resume_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = _add(commands, "resume", resume, "end a pause of the queue or processo")
    sub.add_argument("processo", nargs="?", help="only this processo (default: the whole queue)")


def _breaker_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = _add(
        commands,
        "breaker",
        breaker_reset,
        "close a processo's circuit breaker (breaker reset PROCESSO), or a webhook "
        "subscriber's (breaker reset --subscriber ID)",
    )
    sub.add_argument("action", choices=["reset"], help="reset: close it, forgetting its failures")
    sub.add_argument("processo", help="the processo whose @Task declares the breaker")
    sub.add_argument(
        "--subscriber",
        action="store_true",
        help="the name is a webhook subscriber's id (its row of <queue>_subscriber)",
    )


def _schema_command(name: str, run: Command, what: str) -> CommandParser:
    """ddl and upgrade: db_gen's scripts, printed or applied."""

    def add(commands: argparse._SubParsersAction[_Parser]) -> None:
        sub = _add(
            commands,
            name,
            run,
            f"print {what} (db_gen's), or run it with --apply. PostgreSQL applies it in one "
            "transaction; MySQL/MariaDB commit each DDL statement on its own, so a failure "
            "there leaves the statements before it applied (the upgrade can be run again)",
            database=False,
        )
        sub.add_argument("--dialect", choices=DIALECT_NAMES, help="instead of DB_DRIVER (printing)")
        sub.add_argument(
            "--server",
            choices=SERVER_FAMILIES,
            help="MySQL dialect: the server family (db_gen --server); printing defaults to "
            "mariadb, --apply asks the server (SELECT VERSION())",
        )
        sub.add_argument(
            "--layout",
            choices=("plain", "partitioned"),
            help="the queue table's layout (db_gen --layout; PostgreSQL). upgrade --apply "
            "--layout partitioned moves a plain table to it while workers run "
            "(docs/how-to/partition-a-queue.md)",
        )
        sub.add_argument("--apply", action="store_true", help="run it on the database")

    return add


def _web_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    """It reads neither the database settings nor the queue's."""
    from nsj_queue_lib.web.__main__ import add_arguments, serve

    what = "serve the HTTP API and the console (needs the web extra; docs/web.md)"
    sub = commands.add_parser("web", help=what, description=what)
    sub.set_defaults(standalone=serve)
    add_arguments(sub)


def _health_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    """It reads neither the database settings nor the queue's."""
    what = "whether the worker on this host is ready (/readyz; --live: /healthz), for exec probes"
    sub = commands.add_parser("health", help=what, description=what)
    sub.set_defaults(standalone=health_command.health)
    health_command.add_arguments(sub)


# Every command's parser, in the order --help lists them.
_COMMANDS: dict[str, CommandParser] = {
    "status": _status_command,
    "tasks": _tasks_command,
    "show": _show_command,
    "workflow": _workflow_command,
    "process": _process_command,
    "retry": _retry_command,
    "cancel": _cancel_command,
    "pause": _pause_command,
    "resume": _resume_command,
    "breaker": _breaker_command,
    "ddl": _schema_command("ddl", ddl, "the DDL that creates the queue"),
    "upgrade": _schema_command(
        "upgrade", upgrade, "idempotent DDL that brings an older queue to this version"
    ),
    "web": _web_command,
    "health": _health_command,
}


def _config(args: argparse.Namespace) -> cli_config.Config:
    dialect = getattr(args, "dialect", None)
    apply = getattr(args, "apply", False)
    if dialect is not None and apply:
        raise UsageError("--dialect is for printing; with --apply the database decides")
    return cli_config.load(
        os.environ,
        dsn=args.dsn,
        table=args.table,
        database=args.database or apply,
        dialect=dialect,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code."""
    try:
        args = build_parser(argv).parse_args(argv)
        if args.command is None:
            raise UsageError(
                "a command is required: status, tasks, show, workflow, process, retry, cancel, pause, "
                "resume, breaker, ddl, upgrade, web or health"
            )
        standalone: Callable[[argparse.Namespace], int] | None = getattr(args, "standalone", None)
        if standalone is not None:  # reads no database nor queue settings
            return standalone(args)
        run: Command = args.run
        return run(args, _config(args))
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except NothingToDo as exc:
        return _fail(str(exc), EXIT_NOTHING)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except DatabaseError as exc:
        return _fail(f"database: {exc}", EXIT_USAGE)
    except KeyboardInterrupt:
        return 130


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``nsjq`` process (its console script and ``python -m nsj_queue_lib``):
    ``main(argv)``'s code as the exit status.

    It leaves with ``os._exit`` once stdout, stderr and the log handlers are flushed. A
    normal interpreter exit first tears down every module psycopg loaded, about 35 ms of
    each command on a 2-core machine (a tenth of ``nsjq status``), and nothing of nsjq's
    needs that: ``main()`` has closed its connections and joined its threads."""
    code = main(argv)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (nsjq tasks | head)
            code = code or EXIT_UNFLUSHED
    logging.shutdown()
    os._exit(code)


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: {' '.join(message.split())}", file=sys.stderr)
    return code
