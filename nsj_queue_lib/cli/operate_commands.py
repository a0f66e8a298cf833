"""The commands that change a queue: ``retry ID`` and ``cancel ID``."""

from __future__ import annotations

import argparse

from nsj_queue_lib.cli.config import Config
from nsj_queue_lib.cli.errors import EXIT_OK, NothingToDo
from nsj_queue_lib.cli.inspect_commands import split_chain
from nsj_queue_lib.cli.output import write, write_json
from nsj_queue_lib.cli.session import open_session
from nsj_queue_lib.db.inspection import FAILED_STATUSES
from nsj_queue_lib.exceptions import NotFoundError
from nsj_queue_lib.queue_client import QueueClient


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


def cancel(args: argparse.Namespace, config: Config) -> int:
    """Cancel a task (QueueClient.cancel_task, one transaction): a waiting task becomes
    'cancelada'; a running one is asked to stop; a finished one is left as it is."""
    with open_session(config, autocommit=False) as session:
        client = QueueClient(session.conn, config.queue_table)
        try:
            status = client.cancel_task(args.id)
        except NotFoundError as exc:
            raise NothingToDo(str(exc)) from None
        task = client.get_task(args.id)
        session.conn.commit()
    assert task is not None  # it was found just before, in the same transaction
    if args.json:
        write_json({"task": task["id_inicial"], "attempt": task["id"], "status": status})
    elif status == "processando":
        write(
            f"task {task['id_inicial']}: cancel requested; its worker stops it if the handler "
            "checks current_task() (status processando)"
        )
    elif status == "cancelada":
        write(f"task {task['id_inicial']}: cancelada")
    else:
        write(f"task {task['id_inicial']}: already finished ({status}), nothing changed")
    return EXIT_OK
