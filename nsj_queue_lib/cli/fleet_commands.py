"""The commands that steer the whole fleet of a queue: ``pause [PROCESSO]``,
``resume [PROCESSO]`` and ``breaker reset PROCESSO`` (docs/fleet-control.md)."""

from __future__ import annotations

import argparse
import datetime
import re
from collections.abc import Callable

from nsj_queue_lib.cli.config import Config
from nsj_queue_lib.cli.errors import EXIT_OK
from nsj_queue_lib.cli.output import write, write_json
from nsj_queue_lib.cli.session import open_session
from nsj_queue_lib.queue_client import QueueClient

_FROM_NOW = re.compile(r"(\d+(?:\.\d+)?)([smhd])\Z")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_until(text: str) -> datetime.datetime:
    """``--until``: an ISO 8601 date/time (UTC unless it says otherwise) or a duration
    from now (``30m``, ``2h``, ``1d``), as an aware datetime; argparse's ``type``."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ahead = _FROM_NOW.match(text.strip())
    if ahead:
        amount, unit = ahead.groups()
        return now + datetime.timedelta(seconds=float(amount) * _UNIT_SECONDS[unit])
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: use an ISO date/time such as 2030-05-01T12:00Z, "
            "or 30m, 2h, 1d from now"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.timezone.utc)


def _what(processo: str | None) -> str:
    return "the queue" if processo is None else f"processo {processo!r}"


def pause(args: argparse.Namespace, config: Config) -> int:
    """Pause the queue (or one processo) across every worker, in one transaction."""
    with open_session(config, autocommit=False) as session:
        QueueClient(session.conn, config.queue_table).pause(args.processo, until=args.until)
        session.conn.commit()
    until = None if args.until is None else args.until.isoformat()
    if args.json:
        write_json({"paused": args.processo, "until": until})
    else:
        write(f"{_what(args.processo)} paused" + (f" until {until}" if until else ""))
    return EXIT_OK


def _committed(config: Config, act: Callable[[QueueClient], bool]) -> bool:
    """``act`` on the queue's client in one committed transaction; its answer."""
    with open_session(config, autocommit=False) as session:
        answer = act(QueueClient(session.conn, config.queue_table))
        session.conn.commit()
    return answer


def resume(args: argparse.Namespace, config: Config) -> int:
    """End the pause of the queue (or of one processo), in one transaction."""
    was = _committed(config, lambda client: client.resume(args.processo))
    if args.json:
        write_json({"resumed": args.processo, "was_paused": was})
    else:
        write(f"{_what(args.processo)} " + ("resumed" if was else "was not paused"))
    return EXIT_OK


def breaker_reset(args: argparse.Namespace, config: Config) -> int:
    """Close a processo's circuit breaker (its failures and trial forgotten), in one
    transaction; with ``--subscriber``, a webhook subscriber's."""
    if args.subscriber:
        was = _committed(config, lambda client: client.reset_subscriber_breaker(args.processo))
        what = f"webhook subscriber {args.processo!r}"
    else:
        was = _committed(config, lambda client: client.reset_breaker(args.processo))
        what = f"processo {args.processo!r}"
    if args.json:
        key = "subscriber_breaker_reset" if args.subscriber else "breaker_reset"
        write_json({key: args.processo, "was_tripped": was})
    else:
        state = "closed" if was else "had no failures"
        write(f"circuit breaker of {what} {state}")
    return EXIT_OK
