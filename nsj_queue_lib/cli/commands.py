"""``nsjq``'s commands, each importing its module when it runs.

A command's module imports what that command needs: the client, the fleet's stores, the
schema scripts. Imported together at start-up they cost every command some 40 ms,
``nsjq health`` included, which a Kubernetes exec probe runs every few seconds (109 ms
against 73 ms a run, paired). The argument types that ``argparse`` calls while parsing
(``parse_time``, ``parse_until``) are here for the same reason.
"""

from __future__ import annotations

import argparse
import datetime

from nsj_queue_lib.cli.config import Config


def status(args: argparse.Namespace, config: Config) -> int:
    from nsj_queue_lib.cli.inspect_commands import status as command

    return command(args, config)


def tasks(args: argparse.Namespace, config: Config) -> int:
    from nsj_queue_lib.cli.inspect_commands import tasks as command

    return command(args, config)


def show(args: argparse.Namespace, config: Config) -> int:
    from nsj_queue_lib.cli.inspect_commands import show as command

    return command(args, config)


def workflow(args: argparse.Namespace, config: Config) -> int:
    from nsj_queue_lib.cli.workflow_command import workflow as command

    return command(args, config)


def process(args: argparse.Namespace, config: Config) -> int:
    from nsj_queue_lib.cli.process_command import process as command

    return command(args, config)


def retry(args: argparse.Namespace, config: Config) -> int:
    from nsj_queue_lib.cli.operate_commands import retry as command

    return command(args, config)


def cancel(args: argparse.Namespace, config: Config) -> int:
    from nsj_queue_lib.cli.operate_commands import cancel as command

    return command(args, config)


def pause(args: argparse.Namespace, config: Config) -> int:
    from nsj_queue_lib.cli.fleet_commands import pause as command

    return command(args, config)


def resume(args: argparse.Namespace, config: Config) -> int:
    from nsj_queue_lib.cli.fleet_commands import resume as command

    return command(args, config)


def breaker_reset(args: argparse.Namespace, config: Config) -> int:
    from nsj_queue_lib.cli.fleet_commands import breaker_reset as command

    return command(args, config)


def ddl(args: argparse.Namespace, config: Config) -> int:
    from nsj_queue_lib.cli.schema_commands import ddl as command

    return command(args, config)


def upgrade(args: argparse.Namespace, config: Config) -> int:
    from nsj_queue_lib.cli.schema_commands import upgrade as command

    return command(args, config)


def parse_time(text: str) -> datetime.datetime:
    from nsj_queue_lib.cli.inspect_commands import parse_time as parse

    return parse(text)


def parse_until(text: str) -> datetime.datetime:
    from nsj_queue_lib.cli.fleet_commands import parse_until as parse

    return parse(text)
