"""Pure parts of workflows: the status derived from the tasks (workflow/view.py), the
console's layered layout (web/graph.py) and the builder's checks (workflow/builder.py)."""

from __future__ import annotations

import pytest

from nsj_queue_lib import Workflow
from nsj_queue_lib.web.graph import MAX_DRAWN, layers, layout
from nsj_queue_lib.workflow.view import workflow_status


def row(status, reenfileirado=False, estouro=False):
    return {"status": status, "reenfileirado": reenfileirado, "estouro_tentativas": estouro}


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([row("sucesso"), row("sucesso")], "succeeded"),
        ([row("sucesso"), row("aguardando")], "running"),
        ([row("processando"), row("cancelada")], "running"),
        ([row("falha", reenfileirado=True), row("sucesso")], "running"),  # a retry follows
        ([row("falha", reenfileirado=True, estouro=True), row("cancelada")], "failed"),
        ([row("falha_processando"), row("sucesso")], "failed"),
        ([row("cancelada"), row("sucesso")], "cancelled"),
    ],
)
def test_workflow_status(rows, expected):
    assert workflow_status(rows) == expected


def task(task_id, *parents):
    return {"id_inicial": task_id, "parents": list(parents)}


def test_layers_and_a_diamond_layout():
    tasks = [task(1), task(2, 1), task(3, 1), task(4, 2, 3), task(5)]
    assert layers(tasks) == {1: 0, 2: 1, 3: 1, 4: 2, 5: 0}
    drawn = layout(tasks)
    at = {n["task"]["id_inicial"]: (n["x"], n["y"]) for n in drawn["nodes"]}
    assert at[1][0] < at[2][0] == at[3][0] < at[4][0]
    assert at[2][1] != at[3][1]
    assert {(e["parent"], e["child"]) for e in drawn["edges"]} == {(1, 2), (1, 3), (2, 4), (3, 4)}
    for x, y in at.values():
        assert 0 <= x < drawn["width"] and 0 <= y < drawn["height"]


def test_children_follow_their_parents_rows():
    """The barycentre order: a child of the lower parent is drawn lower."""
    tasks = [task(1), task(2), task(3, 2), task(4, 1)]
    drawn = {n["task"]["id_inicial"]: n["y"] for n in layout(tasks)["nodes"]}
    assert drawn[4] < drawn[3]


def test_large_workflows_are_not_drawn():
    assert layout([task(i) for i in range(1, MAX_DRAWN + 2)]) is None
    assert layout([]) is None


def test_handles_and_checks():
    wf = Workflow("w")
    a = wf.add(processo="p", payload={})
    b = wf.add(processo="p", payload={}, after=[a, a])
    assert (a.index, b.index, a.id) == (0, 1, None)
    assert wf._parents == [[], [0]]
    with pytest.raises(TypeError):
        wf.add(processo="p", payload={}, after=a)
    with pytest.raises(TypeError):
        wf.add(processo="p", payload={}, after=[1])
    with pytest.raises(ValueError, match="prioridade"):
        wf.add(processo="p", payload={}, prioridade=-1)
    with pytest.raises(ValueError):
        Workflow("x" * 201)
