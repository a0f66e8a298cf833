"""Where the console draws a workflow's tasks: a layered layout, computed on the server and
drawn as SVG by ``templates/workflow_graph.html`` (no script, no library).

A task's layer is its longest path from a root (a task without parents): every edge
goes from a layer to a later one, left to right. Within a layer, tasks are ordered by
the mean row of their parents (one pass of the barycentre heuristic, which removes
most crossings of the usual fan-out and fan-in shapes), then by the order added.
Layers are columns, so a 1 -> N -> 1 fan-out draws as one tall middle column; a
workflow of more than ``MAX_DRAWN`` tasks is not drawn (the page lists its tasks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_DRAWN = 400
NODE_WIDTH = 168
NODE_HEIGHT = 46
COLUMN_GAP = 56
ROW_GAP = 14
MARGIN = 8


def layers(tasks: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """{task id: its layer}; parents that are not among ``tasks`` are ignored. Tasks come
    in the order added, so every parent precedes its children (``Workflow.add``)."""
    known = {int(task["id_inicial"]) for task in tasks}
    layer: dict[int, int] = {}
    for task in tasks:
        parents = [p for p in task["parents"] if p in known]
        layer[int(task["id_inicial"])] = 1 + max((layer.get(p, 0) for p in parents), default=-1)
    return layer


def layout(tasks: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Nodes (``x``, ``y``, the task) and edges (``path``, an SVG cubic curve from the
    parent's right side to the child's left side), and the drawing's size; None when
    there are more than ``MAX_DRAWN`` tasks."""
    if len(tasks) > MAX_DRAWN or not tasks:
        return None
    layer = layers(tasks)
    columns: dict[int, list[Mapping[str, Any]]] = {}
    for task in tasks:
        columns.setdefault(layer[int(task["id_inicial"])], []).append(task)
    row: dict[int, int] = {}
    for number in sorted(columns):
        # Parents are in earlier columns, all placed already.
        ordered = sorted(
            enumerate(columns[number]),
            key=lambda item: (_barycentre(item[1], row, item[0]), item[0]),
        )
        for index, (_, task) in enumerate(ordered):
            row[int(task["id_inicial"])] = index
    tallest = max(len(column) for column in columns.values())
    nodes: dict[int, dict[str, Any]] = {}
    for task in tasks:
        task_id = int(task["id_inicial"])
        # Shorter columns are centred on the tallest: a diamond's ends sit mid-height.
        offset = (tallest - len(columns[layer[task_id]])) / 2
        nodes[task_id] = {
            "x": MARGIN + layer[task_id] * (NODE_WIDTH + COLUMN_GAP),
            "y": round(MARGIN + (row[task_id] + offset) * (NODE_HEIGHT + ROW_GAP)),
            "task": task,
        }
    edges = []
    for task in tasks:
        child = nodes[int(task["id_inicial"])]
        for parent_id in task["parents"]:
            parent = nodes.get(parent_id)
            if parent is not None:
                path = _curve(parent, child)
                edges.append(
                    {"parent": parent_id, "child": child["task"]["id_inicial"], "path": path}
                )
    return {
        "nodes": list(nodes.values()),
        "edges": edges,
        "width": 2 * MARGIN + (max(columns) + 1) * (NODE_WIDTH + COLUMN_GAP) - COLUMN_GAP,
        "height": 2 * MARGIN + tallest * (NODE_HEIGHT + ROW_GAP) - ROW_GAP,
        "node_width": NODE_WIDTH,
        "node_height": NODE_HEIGHT,
    }


def _barycentre(task: Mapping[str, Any], row: Mapping[int, int], position: int) -> float:
    """The mean row of the task's parents already placed (its own position for a root)."""
    placed = [row[p] for p in task["parents"] if p in row]
    return sum(placed) / len(placed) if placed else float(position)


def _curve(parent: Mapping[str, Any], child: Mapping[str, Any]) -> str:
    x1 = parent["x"] + NODE_WIDTH
    y1 = parent["y"] + NODE_HEIGHT / 2
    x2 = child["x"]
    y2 = child["y"] + NODE_HEIGHT / 2
    middle = (x1 + x2) / 2
    return f"M{x1},{y1:g} C{middle:g},{y1:g} {middle:g},{y2:g} {x2},{y2:g}"
