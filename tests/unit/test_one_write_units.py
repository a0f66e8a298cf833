"""QUEUE_ONE_WRITE's pure parts: nsjq status's count of held running tasks."""

from __future__ import annotations

from nsj_queue_lib.db.postgres.held_status import move_held


def _row(processo, status, tasks):
    return {
        "processo": processo,
        "status": status,
        "tasks": tasks,
        "oldest_ready_seconds": None,
        "failed_24h": 0,
        "dead_24h": 0,
    }


def test_held_tasks_move_from_ready_to_running():
    rows = [_row("a", "pendente", 5), _row("a", "processando", 1), _row("b", "pendente", 2)]
    moved = {(r["processo"], r["status"]): r["tasks"] for r in move_held(rows, {"a": 3, "b": 2})}
    assert moved == {
        ("a", "pendente"): 2,
        ("a", "processando"): 4,
        ("b", "pendente"): 0,
        ("b", "processando"): 2,
    }


def test_nothing_held_changes_nothing():
    rows = [_row("a", "pendente", 5)]
    assert move_held(rows, {}) == [_row("a", "pendente", 5)]
