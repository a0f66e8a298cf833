"""How a task looks to its user: ``QueueClient.get_task``'s dict, built from a store's
``task_view`` row. Its own module: the client and the workflow view (workflow/view.py),
which the client calls, both build it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def task_view(row: Mapping[str, Any]) -> dict[str, Any]:
    """``get_task``'s answer from a store's ``task_view`` row."""
    progress = None
    if row["progress_done"] is not None:
        progress = {
            "done": int(row["progress_done"]),
            "total": None if row["progress_total"] is None else int(row["progress_total"]),
            "message": row["progress_message"],
        }
    return {
        "id_inicial": int(row["id_inicial"]),
        "id": int(row["id"]),
        "status": row["status"],
        "tentativa": row["tentativa"],
        "mensagem": row["mensagem"],
        "cancel_requested": bool(row["cancel_requested"]),
        "progress": progress,
    }
