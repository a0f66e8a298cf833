"""``nsjq workflow ID``: a workflow's status and its tasks with their parents;
``--cancel`` cancels its unfinished tasks first (``QueueClient.cancel_workflow``)."""

from __future__ import annotations

import argparse
from typing import Any

from nsj_queue_lib.cli.config import Config
from nsj_queue_lib.cli.errors import EXIT_OK, NothingToDo
from nsj_queue_lib.cli.output import cell, table, write, write_json
from nsj_queue_lib.cli.session import open_session
from nsj_queue_lib.exceptions import NotFoundError
from nsj_queue_lib.queue_client import QueueClient

MESSAGE_WIDTH = 60
_HEADERS = ("task", "processo", "chave_externa", "status", "tentativa", "after", "mensagem")


def workflow(args: argparse.Namespace, config: Config) -> int:
    with open_session(config, autocommit=False) as session:
        client = QueueClient(session.conn, config.queue_table)
        try:
            cancelled = client.cancel_workflow(args.id) if args.cancel else None
        except NotFoundError as exc:
            raise NothingToDo(str(exc)) from None
        found = client.get_workflow(args.id)
        session.conn.commit()
    if found is None:
        raise NothingToDo(f"workflow {args.id} not found in {config.queue_table}")
    if args.json:
        write_json(found if cancelled is None else dict(found, cancelled=cancelled))
        return EXIT_OK
    counts = ", ".join(f"{n} {status}" for status, n in sorted(found["counts"].items()))
    write(
        f"workflow {found['id']} ({cell(found['name'])}, created {cell(found['created_at'])}): "
        f"{found['status']}; {len(found['tasks'])} task(s): {counts}"
    )
    write(table(_HEADERS, [_row(task) for task in found["tasks"]]))
    return EXIT_OK


def _row(task: dict[str, Any]) -> list[Any]:
    return [
        task["id_inicial"],
        task["processo"],
        task["chave_externa"],
        task["status"],
        task["tentativa"],
        ",".join(map(str, task["parents"])) or None,
        cell(task["mensagem"], MESSAGE_WIDTH),
    ]
