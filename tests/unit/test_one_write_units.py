"""QUEUE_ONE_WRITE's pure parts: nsjq status's count of held running tasks."""

from __future__ import annotations

from nsj_queue_lib.db.postgres.held_status import DEPTH_BLANK, move_held


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


def test_a_depth_row_made_for_held_tasks_has_the_depth_columns():
    rows = [{"processo": "a", "status": "pendente", "tasks": 4, "oldest_ready_seconds": 2.0}]
    assert move_held(rows, {"a": 3}, DEPTH_BLANK) == [
        {"processo": "a", "status": "pendente", "tasks": 1, "oldest_ready_seconds": 2.0},
        {"processo": "a", "status": "processando", "tasks": 3, "oldest_ready_seconds": None},
    ]


def test_nothing_held_changes_nothing():
    rows = [_row("a", "pendente", 5)]
    assert move_held(rows, {}) == [_row("a", "pendente", 5)]


def _parts(one_write: bool, per_processo: dict[str, float]):
    import types

    driver = types.SimpleNamespace(
        held_session=lambda store, liveness: "held", session=lambda store, liveness: "plain"
    )
    return types.SimpleNamespace(
        settings=types.SimpleNamespace(queue_one_write=one_write, queue_name="q"),
        task_timeouts=types.SimpleNamespace(per_processo=per_processo),
        driver=driver,
        store=None,
        lock_client=None,
    )


def test_a_worker_holds_its_groups_only_where_nothing_ends_their_sessions(caplog):
    import types

    from nsj_queue_lib.runtime.worker_parts import WorkerParts

    groups = types.SimpleNamespace(group_commit=True)
    single = types.SimpleNamespace(group_commit=False)
    assert WorkerParts._session(_parts(True, {}), groups, None, None) == "held"
    assert WorkerParts._session(_parts(False, {}), groups, None, None) == "plain"
    assert WorkerParts._session(_parts(True, {}), single, None, None) == "plain"
    assert WorkerParts._session(_parts(True, {}), groups, None, object()) == "plain"
    assert WorkerParts._session(_parts(True, {"slow": 5.0}), groups, None, None) == "plain"
    assert "QUEUE_ONE_WRITE ignored" in caplog.text and "slow" in caplog.text
