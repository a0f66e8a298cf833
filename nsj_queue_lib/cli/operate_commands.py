"""The commands that change a queue: ``retry ID``.

``cancel`` waits for the cancellation of a task (a ``cancelada`` status and a
flag a running handler sees), which the queue does not have yet.
"""

from __future__ import annotations

import argparse

from nsj_queue_lib.cli.config import Config
from nsj_queue_lib.cli.errors import EXIT_OK, NothingToDo
from nsj_queue_lib.cli.inspect_commands import split_chain
from nsj_queue_lib.cli.output import write, write_json
from nsj_queue_lib.cli.session import open_session
from nsj_queue_lib.db.inspection import FAILED_STATUSES


def retry(args: argparse.Namespace, config: Config) -> int:
    """A new 'pendente' attempt, due now, for a task that ran out of attempts."""
    with open_session(config, autocommit=False) as session:
        rows = session.store.task_chain(session.conn, args.id)
        if not rows:
            raise NothingToDo(f"task {args.id} not found in {config.queue_table}")
        attempts, _ = split_chain(rows)
        latest = attempts[-1]
        exhausted = (
            latest["estouro_tentativas"]
            and not latest["reenfileirado"]
            and latest["status"] in FAILED_STATUSES
        )
        if not exhausted:
            raise NothingToDo(
                f"task {attempts[0]['id']} is {latest['status']} (attempt {latest['id']}): "
                "only a task that ran out of attempts can be retried"
            )
        new_id = session.store.retry_task(session.conn, latest["id"])
        if new_id is None:
            session.conn.rollback()
            raise NothingToDo(f"task {attempts[0]['id']} changed meanwhile: nothing retried")
        session.conn.commit()
    if args.json:
        write_json(
            {"task": attempts[0]["id"], "attempt": new_id, "tentativa": latest["tentativa"] + 1}
        )
    else:
        write(
            f"task {attempts[0]['id']}: new attempt {new_id} (tentativa {latest['tentativa'] + 1}), "
            "pendente now"
        )
    return EXIT_OK
