"""Workflows over HTTP, on PostgreSQL and MariaDB (FastAPI's TestClient): GET
/api/v1/workflows/{id}, POST /api/v1/workflows/{id}/cancel, and the console's workflow
page (its graph: a node per task with its status, an edge per dependency)."""

from __future__ import annotations

import re

from tests.integration import test_web_api
from tests.integration.test_cli_workflow import enqueue_diamond
from tests.integration.test_web_api import READONLY

# The web API tests' fixtures: a queue on PostgreSQL and on MariaDB, and the app over it.
queue = test_web_api.queue
web = test_web_api.web


def test_get_and_cancel_a_workflow(web, queue):
    ids = enqueue_diamond(queue)
    found = web.get(f"/api/v1/workflows/{ids['A']}")
    assert found.status_code == 200, found.text
    body = found.json()
    assert (body["id"], body["name"], body["status"], body["queue"]) == (
        ids["A"],
        "nightly <load>",
        "running",
        queue.table,
    )
    assert isinstance(body["created_at"], str)
    assert [(t["id_inicial"], t["status"], t["parents"]) for t in body["tasks"]] == [
        (ids["A"], "pendente", []),
        (ids["B"], "aguardando", [ids["A"]]),
        (ids["C"], "aguardando", [ids["A"]]),
        (ids["D"], "aguardando", sorted([ids["B"], ids["C"]])),
    ]
    assert web.get("/api/v1/workflows/999999999").status_code == 404
    refused = web.post(
        f"/api/v1/workflows/{ids['A']}/cancel", headers={"Authorization": f"Bearer {READONLY}"}
    )
    assert refused.status_code == 403
    cancelled = web.post(f"/api/v1/workflows/{ids['A']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json() == {
        "id": ids["A"],
        "status": "cancelled",
        "tasks": {str(i): "cancelada" for i in ids.values()},
    }
    assert web.post("/api/v1/workflows/999999999/cancel").status_code == 404


def test_the_console_draws_the_workflow(web, queue):
    ids = enqueue_diamond(queue)
    page = web.get(f"/queues/{queue.table}/workflows/{ids['A']}")
    assert page.status_code == 200, page.text
    html = page.text
    assert "nightly &lt;load&gt;" in html and "<load>" not in html
    nodes = dict(re.findall(r'data-task-id="(\d+)" data-status="(\w+)"', html))
    assert nodes == {
        str(ids["A"]): "pendente",
        str(ids["B"]): "aguardando",
        str(ids["C"]): "aguardando",
        str(ids["D"]): "aguardando",
    }
    edges = set(re.findall(r'data-parent="(\d+)" data-child="(\d+)"', html))
    assert edges == {
        (str(ids["A"]), str(ids["B"])),
        (str(ids["A"]), str(ids["C"])),
        (str(ids["B"]), str(ids["D"])),
        (str(ids["C"]), str(ids["D"])),
    }
    partial = web.get(f"/queues/{queue.table}/workflows/{ids['A']}?partial=1").text
    assert 'id="workflow-graph"' in partial and "<html" not in partial
    # A task's page links to its workflow.
    task_page = web.get(f"/queues/{queue.table}/tasks/{ids['D']}").text
    assert f'href="/queues/{queue.table}/workflows/{ids["A"]}"' in task_page
    assert web.get(f"/queues/{queue.table}/workflows/999999999").status_code == 404
