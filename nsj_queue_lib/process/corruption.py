"""A process whose task failed for good is corrupted (only repair tasks run then).

Called where a worker writes a final failure (``db/task_session.py``'s
``write_failure``), in that transaction: the failure and the corruption commit
together, whichever path wrote it (the handler's failure, a timeout, the retry
service's rescue of a task whose worker died on its last attempt).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from nsj_queue_lib.db.process_store import ProcessStore
from nsj_queue_lib.exceptions import WorkflowUnsupported
from nsj_queue_lib.model import MENSAGEM_LIMIT
from nsj_queue_lib.process.ids import process_id_of

# The library's logger of processes (nsj_queue_lib.log names them so); not imported from
# there: log.py reads settings, which import the drivers this module is imported by.
logger = logging.getLogger("nsj_queue_lib.process")


def after_failure(
    store: Any, conn: Any, row: Mapping[str, Any], attempt_id: int, mensagem: str
) -> None:
    """A worker wrote a final failure (dead letter, or nothing after) of a task: when it is
    a process's, the process is corrupted by it, in the same transaction."""
    process_id = process_id_of(row)
    if process_id is None:
        return
    queue_table = getattr(store, "queue_table", None)
    if not isinstance(queue_table, str):
        return
    try:
        pstore = ProcessStore.for_store(store, queue_table)
    except WorkflowUnsupported:
        return
    detail = f"task {attempt_id} failed for good: {mensagem}"[:MENSAGEM_LIMIT]
    if pstore.corrupt(conn, attempt_id, detail):
        logger.warning(
            "process=%s: corrupted by task %s (failed for good); only repair tasks run now",
            process_id,
            attempt_id,
        )
