"""The console's workflow page in a real browser (Debian's chromium driven by Playwright),
with a real web server and a real worker process on PostgreSQL (the fixtures of
``test_web_console.py``).

A diamond workflow whose root runs for a while, one branch succeeding and the other
failing for good: the page draws a node per task and an edge per dependency, each node
showing its task's status as it changes (the fragment refreshes itself), until the
workflow is 'failed' with the last task 'cancelada'. Writes test-artifacts/web/
web-workflow.png (copy it to docs/images/ to refresh the documentation's).
"""

from __future__ import annotations

import psycopg
import pytest

from nsj_queue_lib import QueueClient, Workflow
from tests.acceptance import test_web_console
from tests.acceptance.test_web_console import IMAGES, _browser_or_skip, _sign_in, desktop_page

# The console test's fixture: a web server and a worker process on a PostgreSQL queue.
server = test_web_console.server

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("web_console")]


def enqueue(dsn: str, table: str) -> dict[str, int]:
    wf = Workflow("invoices of the day")
    a = wf.add(processo="extract", payload={"steps": 20, "step_seconds": 0.25}, chave_externa="A")
    b = wf.add(processo="transform", payload={}, chave_externa="B", after=[a])
    c = wf.add(processo="validate", payload={"fail_always": True, "invoice": 7}, after=[a])
    d = wf.add(processo="load", payload={}, chave_externa="D", after=[b, c])
    with psycopg.connect(dsn) as conn:
        wf.enqueue(QueueClient(conn, table))
    return {"A": a.id, "B": b.id, "C": c.id, "D": d.id, "workflow": wf.id}


def test_the_workflow_page_draws_the_graph_with_each_task_status(server, pg_queue, pg_dsn):
    executable = _browser_or_skip()
    from playwright.sync_api import expect

    base, api = server
    table = pg_queue.table
    IMAGES.mkdir(parents=True, exist_ok=True)
    with desktop_page(executable) as (_, page):
        _sign_in(page, base)
        ids = enqueue(pg_dsn, table)
        page.goto(f"{base}/queues/{table}/workflows/{ids['workflow']}")
        graph = page.locator("#workflow-graph")

        def node(key: str):
            return graph.locator(f"a.node[data-task-id='{ids[key]}']")

        expect(graph.locator("a.node")).to_have_count(4)
        expect(graph.locator("path.edge")).to_have_count(4)
        # The root runs (about 5 s) while its children wait for it.
        expect(node("A")).to_have_attribute("data-status", "processando", timeout=15_000)
        expect(node("A").locator(".node-status")).to_have_text("processando")
        for key in ("B", "C", "D"):
            expect(node(key)).to_have_attribute("data-status", "aguardando")
        expect(page.locator("#workflow-status")).to_have_text("running")
        page.screenshot(path=str(IMAGES / "web-workflow-running.png"), full_page=True)

        # The page follows the tasks: B succeeds, C fails for good, D is cancelled.
        expect(page.locator("#workflow-status")).to_have_text("failed", timeout=30_000)
        expected = {"A": "sucesso", "B": "sucesso", "C": "falha", "D": "cancelada"}
        for key, status in expected.items():
            expect(node(key)).to_have_attribute("data-status", status)
            expect(node(key).locator(".node-status")).to_have_text(status)
        # The edges join the right boxes: D after B and C.
        for parent in ("B", "C"):
            edge = f"path.edge[data-parent='{ids[parent]}'][data-child='{ids['D']}']"
            expect(graph.locator(edge)).to_have_count(1)
        page.screenshot(path=str(IMAGES / "web-workflow.png"), full_page=True)

        # A node leads to its task's page, which links back.
        node("C").click()
        page.wait_for_url(f"{base}/queues/{table}/tasks/{ids['C']}")
        expect(page.locator("#workflow-link")).to_have_text(f"workflow {ids['workflow']}")
    assert api.get(f"/api/v1/workflows/{ids['workflow']}").json()["status"] == "failed"
