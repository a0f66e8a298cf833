"""``nsjq process ID``: a process instance (``QueueClient.get_process``): its status,
detail, corruption, pending timer and state, then its recent tasks and events."""

from __future__ import annotations

import argparse
import json
from typing import Any

from nsj_queue_lib.cli.config import Config
from nsj_queue_lib.cli.errors import EXIT_OK, NothingToDo
from nsj_queue_lib.cli.output import cell, table, write, write_json
from nsj_queue_lib.cli.session import open_session
from nsj_queue_lib.queue_client import QueueClient

MESSAGE_WIDTH = 60
_TASK_HEADERS = ("task", "kind", "processo", "status", "started_at", "finished_at", "response")
_EVENT_HEADERS = ("event", "type", "task", "created_at", "payload")


def process(args: argparse.Namespace, config: Config) -> int:
    with open_session(config, autocommit=False) as session:
        client = QueueClient(session.conn, config.queue_table)
        try:
            found = client.get_process(args.id, events=args.events, tasks=args.tasks)
        except ValueError as exc:
            raise NothingToDo(str(exc)) from None
        session.conn.commit()
    if found is None:
        raise NothingToDo(f"process {args.id!r} not found in {config.queue_table}")
    if args.json:
        write_json(found)
        return EXIT_OK
    corrupted = f"; corrupted by task {found['corrupted_by']}" if found["corrupted"] else ""
    write(
        f"process {cell(found['process_id'])} ({cell(found['processo'])}, created "
        f"{cell(found['created_at'])}): {cell(found['status'])}{corrupted}"
    )
    if found["detail"]:
        write(f"detail: {cell(found['detail'], MESSAGE_WIDTH)}")
    for timer in found["timers"]:
        write(
            f"timer: task {timer['id']} ({cell(timer['processo'])}) due {cell(timer['data_hora'])}"
        )
    if found["remove_at"] is not None:
        write(f"removed after: {cell(found['remove_at'])}")
    write(f"state: {_json(found['state'])}")
    write(table(_TASK_HEADERS, [_task_row(task) for task in found["tasks"]]))
    if found["events"]:
        write(table(_EVENT_HEADERS, [_event_row(event) for event in found["events"]]))
    return EXIT_OK


def _json(value: Any) -> str:
    return cell(json.dumps(value, ensure_ascii=False, sort_keys=True), MESSAGE_WIDTH)


def _task_row(task: dict[str, Any]) -> list[Any]:
    return [
        task["id"],
        task["kind"],
        task["processo"],
        task["status"],
        task["started_at"],
        task["finished_at"],
        None if task["response"] is None else _json(task["response"]),
    ]


def _event_row(event: dict[str, Any]) -> list[Any]:
    return [
        event["id"],
        event["event_type"],
        event["task_id"],
        event["created_at"],
        None if event["payload"] is None else _json(event["payload"]),
    ]
