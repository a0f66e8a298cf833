"""The console in a real browser: Debian's chromium driven by Playwright (no browser download).

A real web server (``python -m nsj_queue_lib.web`` on a free port) and a real
worker process (``workers/web_worker.py``) drain a PostgreSQL queue. The test
signs in, sees a task enqueued through the API appear in the live list, watches
its progress move, cancels it while it runs, and retries a dead letter from the
dead-letters page. It writes the screenshots into test-artifacts/web/ (not
tracked; copy them to docs/images/ to refresh the documentation's). Without chromium it skips, except in CI (CI=true),
where .ci/run installs it and a missing browser fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx2 as httpx  # the test extra pins httpx2 (what starlette's TestClient uses)
import pytest

from tests.helpers.databases import ci_enabled
from tests.helpers.processes import ROOT, wait_for, worker_env

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
IMAGES = ROOT / "test-artifacts" / "web"  # a run must not rewrite tracked files
TOKEN = "browser-test-token-0123456789"

# One worker runs the module: one chromium at a time on a 2-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("web_console")]


def _browser_or_skip() -> Path:
    if CHROMIUM.exists() or shutil.which(str(CHROMIUM)):
        return CHROMIUM
    reason = f"no chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)"
    if ci_enabled():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(pg_dsn, pg_queue, workers):
    """(base URL, API client) of a web server process, with one worker process draining."""
    port = _free_port()
    env = worker_env(pg_dsn, pg_queue.table, QUEUE_MAX_RETRY="1")
    workers.start("web_worker.py", env, "worker")
    web_env = dict(env, QUEUE_WEB_TOKEN=TOKEN, QUEUE_WEB_HOST="127.0.0.1", QUEUE_WEB_PORT=str(port))
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsj_queue_lib.web"],
        env=web_env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)

    def up() -> bool:
        assert proc.poll() is None, "the web server exited"
        try:
            return api.get("/health").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(up, 20, "the web server to answer /health")
        yield base, api
    finally:
        api.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.seek(0)
        print(log.read().decode(errors="replace")[-3000:])
        log.close()


def _status(api: httpx.Client, task_id: int) -> str:
    return str(api.get(f"/api/v1/tasks/{task_id}").json()["status"])


def test_console_follows_cancels_and_retries_real_tasks(server, pg_queue):
    executable = _browser_or_skip()
    from playwright.sync_api import expect, sync_playwright

    base, api = server
    table = pg_queue.table
    IMAGES.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(executable), args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.on("dialog", lambda dialog: dialog.accept())
        try:
            page.goto(f"{base}/")
            page.fill("input[name=token]", TOKEN)
            page.click("button[type=submit]")
            page.wait_for_url(f"{base}/")

            # A task enqueued through the API appears in the list already open.
            page.goto(f"{base}/queues/{table}/tasks")
            body = {"processo": "import", "payload": {"steps": 60, "step_seconds": 0.25}}
            task_id = api.post("/api/v1/tasks", json={**body, "chave_externa": "<b>k</b>"}).json()[
                "id"
            ]
            page.locator(f"a[href$='/tasks/{task_id}']").wait_for(timeout=10_000)

            # Its progress moves on the task page, which refreshes itself.
            page.goto(f"{base}/queues/{table}/tasks/{task_id}")
            text = page.locator("#progress-text")
            text.wait_for(timeout=15_000)
            first = text.inner_text()
            # The page's policy forbids eval: wait with locators, not wait_for_function.
            expect(text).not_to_have_text(first, timeout=10_000)
            page.screenshot(path=str(IMAGES / "web-task.png"), full_page=True)

            # Cancel while it runs: the worker stops it and it ends cancelada.
            page.click("#cancel")
            expect(page.locator("#task-status")).to_have_text("cancelada", timeout=15_000)
            assert _status(api, task_id) == "cancelada"

            # A task that fails its only attempt is a dead letter; retry it from the console.
            failing = {"processo": "sync", "payload": {"fail_first": True}}
            dead_id = api.post("/api/v1/tasks", json=failing).json()["id"]
            wait_for(lambda: _status(api, dead_id) == "falha", 15, "the task to fail")
            page.goto(f"{base}/queues/{table}/tasks?exhausted=1")
            page.check(f"input[name=ids][value='{dead_id}']")
            page.click("#bulk button[type=submit]")
            page.locator(".notice").wait_for()
            wait_for(lambda: _status(api, dead_id) == "sucesso", 15, "the retried task to succeed")

            # Its page draws both attempts on a timeline, each run by the worker named.
            page.goto(f"{base}/queues/{table}/tasks/{dead_id}")
            expect(page.locator("svg.timeline rect.run")).to_have_count(2)
            expect(page.locator("svg.timeline rect.run.falha")).to_have_count(1)
            expect(page.locator("svg.timeline rect.run.sucesso")).to_have_count(1)
            workers = page.locator("table.attempts td.worker").all_inner_texts()
            assert len(workers) == 2 and all(":" in w for w in workers), workers
            page.screenshot(path=str(IMAGES / "web-task-timeline.png"), full_page=True)
            for n in range(3):
                api.post("/api/v1/tasks", json={"processo": "report", "payload": {"n": n}})

            page.goto(f"{base}/")
            page.locator("svg.chart").first.wait_for()
            page.screenshot(path=str(IMAGES / "web-overview.png"), full_page=True)
            phone = browser.new_page(viewport={"width": 390, "height": 844})
            phone.context.add_cookies(page.context.cookies())
            phone.goto(f"{base}/queues/{table}/tasks")
            phone.screenshot(path=str(IMAGES / "web-phone.png"))
        finally:
            browser.close()
