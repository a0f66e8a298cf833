"""The console's process page in a real browser (Debian's chromium driven by Playwright),
with a real web server and a real worker process on PostgreSQL (the fixtures of
``test_web_console.py``; the worker's process handlers are in ``workers/web_worker.py``).

An invoice process started and called over the API (``?wait=`` answers the handler's
response): its page shows the state, status and detail, follows a call while it runs
(the fragment refreshes itself), lists the pending timer a call set, turns red when a
call fails for good (corrupted: the API refuses calls with 409), and recovers with a
repair; each task in its timeline links to the task's page, which links back. Writes
test-artifacts/web/web-process.png (copy it to docs/images/ to refresh the documentation's).
"""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from tests.acceptance import test_web_console
from tests.acceptance.test_web_console import IMAGES, RED, _browser_or_skip, _sign_in, desktop_page

# The console test's fixture: a web server and a worker process on a PostgreSQL queue.
server = test_web_console.server

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("web_console")]

PROCESS = "invoice/2026-0042"


def test_the_process_page_follows_state_timer_corruption_and_repair(server, pg_queue):
    executable = _browser_or_skip()
    from playwright.sync_api import expect

    base, api = server
    table = pg_queue.table
    calls = f"/api/v1/processes/{quote(PROCESS, safe='')}"
    IMAGES.mkdir(parents=True, exist_ok=True)
    with desktop_page(executable) as (_, page):
        _sign_in(page, base)
        started = api.post(
            "/api/v1/processes?wait=20",
            json={"process_id": PROCESS, "processo": "invoice", "payload": {"add": 100}},
        )
        assert started.status_code == 201, started.text
        assert started.json()["response"] == {"total": 100}
        called = api.post(
            f"{calls}/calls?wait=20", json={"processo": "add_line", "payload": {"add": 50}}
        )
        assert called.status_code == 201 and called.json()["response"] == {"total": 150}

        page.goto(f"{base}/queues/{table}/processes/{quote(PROCESS, safe='')}")
        expect(page.locator("#process-id")).to_have_text(PROCESS)
        expect(page.locator("#process-status")).to_have_text("open")
        expect(page.locator("#process-detail")).to_have_text("2 lines, total 150")
        expect(page.locator("#process-timer")).to_have_text("none")
        rows = page.locator("tr.process-task")
        expect(rows).to_have_count(2)
        expect(page.locator("tr.process-event[data-event='added']")).to_have_count(2)

        # A call that runs for about 2 s: the page shows it running, then its outcome.
        slow = api.post(
            f"{calls}/calls", json={"processo": "add_line", "payload": {"add": 25, "steps": 8}}
        ).json()["id"]
        running = page.locator(f"tr.process-task[data-task-id='{slow}'] .status")
        expect(running).to_have_text("processando", timeout=10_000)
        expect(page.locator("#process-detail")).to_have_text("3 lines, total 175", timeout=15_000)
        expect(running).to_have_text("sucesso")
        expect(page.locator(f"tr.process-task[data-task-id='{slow}'] code.response")).to_have_text(
            '{"total": 175}'
        )

        # A call that sets a timer: the pending timer, due in 10 minutes.
        timer_call = api.post(
            f"{calls}/calls?wait=20",
            json={"processo": "schedule_reminder", "payload": {"remind_in": 600}},
        )
        assert timer_call.status_code == 201, timer_call.text
        expect(page.locator("#process-timer")).to_contain_text("remind", timeout=5_000)
        expect(page.locator("#process-timer time")).to_have_text(re.compile(r"in (9|10) min"))
        expect(page.locator("tr.process-task[data-kind='timer'] .status")).to_have_text("pendente")

        # A call that fails for good corrupts the process: red, and calls are refused.
        failed = api.post(
            f"{calls}/calls?wait=20",
            json={
                "processo": "send_to_tax_service",
                "payload": {"fail_always": True, "invoice": 42},
            },
        )
        assert failed.json()["task"]["status"] == "falha", failed.text
        expect(page.locator("#process-corrupted")).to_have_text("only repairs run", timeout=5_000)
        expect(page.locator("#process-status")).to_have_text("corrupted")
        expect(page.locator("#process-status")).to_have_css("color", RED)
        expect(page.locator("#corrupted-by")).to_have_text(f"task {failed.json()['id']}")
        refused = api.post(f"{calls}/calls", json={"processo": "add_line", "payload": {"add": 1}})
        assert refused.status_code == 409
        page.screenshot(path=str(IMAGES / "web-process-corrupted.png"), full_page=True)

        # A repair mends it.
        repaired = api.post(
            f"{calls}/repairs?wait=20", json={"processo": "reconcile", "payload": {}}
        )
        assert repaired.status_code == 201 and repaired.json()["response"] == {"total": 175}
        expect(page.locator("#process-status")).to_have_text("reconciled", timeout=5_000)
        expect(page.locator("#process-corrupted")).to_have_count(0)
        expect(page.locator("tr.process-task[data-kind='repair'] .status")).to_have_text("sucesso")
        expect(rows).to_have_count(7)  # start, 4 calls, the timer, the repair
        page.screenshot(path=str(IMAGES / "web-process.png"), full_page=True)

        # A task of the timeline leads to its page, which links back to the process.
        page.click(f"tr.process-task[data-task-id='{slow}'] a")
        page.wait_for_url(f"{base}/queues/{table}/tasks/{slow}")
        expect(page.locator("#process-link")).to_have_text(f"process {PROCESS}")
        page.click("#process-link")
        expect(page.locator("#process-id")).to_have_text(PROCESS)
    found = api.get(f"{calls}").json()
    assert found["state"] == {"total": 175, "lines": [100, 50, 25]}
    assert [t["kind"] for t in found["tasks"]] == [
        "start",
        "call",
        "call",
        "call",
        "timer",
        "call",
        "repair",
    ]
