"""The console in a real browser: Debian's chromium driven by Playwright (no browser download).

A real web server (``python -m nsj_queue_lib.web`` on a free port) and a real
worker process (``workers/web_worker.py``) drain a PostgreSQL queue. The test
signs in, sees a task enqueued through the API appear in the live list, watches
its progress move, cancels it while it runs, and retries a dead letter from the
dead-letters page. A second test reads a queue as an operator does: tasks of
three processos, one always failing; the list's state words (a dead letter in
red, linked to its task), relative times, the failed task's error and the
overview's rows per processo and live worker. It writes the screenshots into test-artifacts/web/ (not
tracked; copy them to docs/images/ to refresh the documentation's). Without chromium it skips, except in CI (CI=true),
where .ci/run installs it and a missing browser fails.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx  # the test extra pins httpx2 (what starlette's TestClient uses)
import pytest

from tests.helpers.databases import ci_enabled
from tests.helpers.endpoints import free_port
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


@contextlib.contextmanager
def desktop_page(executable: Path) -> Iterator[tuple[Any, Any]]:
    """(browser, a 1280x800 page) of a headless chromium at ``executable``, closed after."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(executable), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser, browser.new_page(viewport={"width": 1280, "height": 800})
        finally:
            browser.close()


@pytest.fixture
def server(request, pg_dsn, pg_queue, workers):
    """(base URL, API client) of a web server process, with one worker process draining; the
    worker's settings (one attempt per task by default) change by indirect parametrization."""
    port = free_port()
    env = worker_env(
        pg_dsn, pg_queue.table, **{"QUEUE_MAX_RETRY": "1", **getattr(request, "param", {})}
    )
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
    from playwright.sync_api import expect

    base, api = server
    table = pg_queue.table
    IMAGES.mkdir(parents=True, exist_ok=True)
    with desktop_page(executable) as (browser, page):
        page.on("dialog", lambda dialog: dialog.accept())
        _sign_in(page, base)

        # A task enqueued through the API appears in the list already open.
        page.goto(f"{base}/queues/{table}/tasks")
        body = {"processo": "import", "payload": {"steps": 60, "step_seconds": 0.25}}
        task_id = api.post("/api/v1/tasks", json={**body, "chave_externa": "<b>k</b>"}).json()["id"]
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


# The operator's queue: tasks of three processos, one of which always fails (two
# attempts, 0.6 s apart), and a report due in an hour.
MIXED = [
    *({"processo": "report", "payload": {"n": n}} for n in range(4)),
    *({"processo": "import", "payload": {"steps": 3, "step_seconds": 0.1}} for _ in range(3)),
    *({"processo": "invoice", "payload": {"fail_always": True, "invoice": n}} for n in range(3)),
]
TWO_ATTEMPTS = {"QUEUE_MAX_RETRY": "2", "QUEUE_BASE_INTERVAL_RETRY": "0.01"}
RED = "rgb(196, 51, 51)"  # console.css's --bad
ACTIVE = ("pendente", "agendada", "processando")


def _settled(api: httpx.Client) -> list[dict]:
    """The task list once nothing is due or runs and every dead letter was handled."""
    tasks = api.get("/api/v1/tasks", params={"limit": 100}).json()["tasks"]
    # A dead letter still to run is 'pendente' too, but its state is "dead letter".
    busy = [t for t in tasks if t["status"] in ACTIVE and t["state"] != "scheduled"]
    return [] if busy or len(tasks) < len(MIXED) + 4 else tasks


@pytest.mark.parametrize("server", [TWO_ATTEMPTS], indirect=True)
def test_console_shows_tasks_states_errors_and_workers_as_an_operator_reads_them(server, pg_queue):
    executable = _browser_or_skip()
    from playwright.sync_api import expect

    base, api = server
    table = pg_queue.table
    IMAGES.mkdir(parents=True, exist_ok=True)
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    for body in [*MIXED, {"processo": "report", "payload": {}, "data_hora": later.isoformat()}]:
        assert api.post("/api/v1/tasks", json=body).status_code == 201
    tasks = wait_for(lambda: _settled(api), 30, "the tasks and their dead letters to settle")
    dead = [t for t in tasks if t["state"] == "dead_letter"]
    assert len(dead) == 3 and all(t["status"] == "sucesso" for t in dead)
    with desktop_page(executable) as (browser, page):
        _sign_in(page, base)
        # One row per task, its state in words beside the raw status.
        page.goto(f"{base}/queues/{table}/tasks")
        rows = page.locator("table.tasks tbody tr")
        expect(rows).to_have_count(len(MIXED) + 4)
        expect(page.locator("span.state", has_text="completed")).to_have_count(7)
        expect(page.locator("span.state", has_text="exhausted")).to_have_count(3)
        expect(page.locator("span.state", has_text="scheduled")).to_have_count(1)
        expect(page.locator("time.rel", has_text=re.compile("^in (59 min|1 h)$"))).to_have_count(1)
        # A dead letter reads as one, in red, linked to the task it came from.
        letter = rows.filter(has_text="dead letter").first
        expect(letter.locator("span.state")).to_have_text("dead letter")
        expect(letter.locator("span.state")).to_have_css("background-color", RED)
        expect(letter.locator(".status")).to_have_text("sucesso")
        # Relative times, the exact one on hover, no microseconds.
        when = letter.locator("time.rel").first
        expect(when).to_have_text(re.compile(r"^(just now|\d+ s ago|\d+ min ago)$"))
        expect(when).to_have_attribute("title", re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$"))
        assert not re.search(r"\.\d{6}", page.locator("table.tasks").inner_text())
        page.screenshot(path=str(IMAGES / "web-tasks.png"), full_page=True)

        # Its link leads to the exhausted task: its whole error and its dead letter.
        live = letter.locator("a.live-link")
        live_id = live.inner_text()
        live.click()
        page.wait_for_url(f"{base}/queues/{table}/tasks/{live_id}")
        expect(page.locator("#task-state")).to_have_text("exhausted")
        states = page.locator("table.attempts span.state").all_inner_texts()
        assert states == ["retried", "exhausted", "dead letter"], states
        error = page.locator("#last-error")
        expect(error.locator("pre")).to_contain_text("ValueError: invoice")
        expect(error).to_contain_text("traceback is in the log of worker")
        expect(page.locator("#dead-letter")).to_be_visible()
        page.screenshot(path=str(IMAGES / "web-dead-letter.png"), full_page=True)
        # The words of a relative time move on as time passes (console.js).
        started = page.locator("table.attempts time.rel").first
        expect(started).not_to_have_text(started.inner_text(), timeout=15_000)

        # The overview: a row per processo, the live worker.
        page.goto(f"{base}/")
        processos = page.locator("table.processos tbody tr")
        expect(processos).to_have_count(3)
        invoice = processos.filter(has_text="invoice")
        expect(invoice.locator("td").nth(6)).to_have_text("6")  # failed attempts (1 h)
        expect(invoice.locator("td").nth(7)).to_have_text("3")  # dead letters (1 h)
        expect(processos.filter(has_text="report").locator("td").nth(4)).to_have_text("4")
        worker = page.locator("table.workers td.worker")
        expect(worker).to_have_count(1)
        expect(worker).to_contain_text(":")
        expect(page.locator("table.workers time.rel").last).to_have_attribute(
            "title", re.compile(r"UTC$")
        )
        page.screenshot(path=str(IMAGES / "web-overview.png"), full_page=True)

        phone = browser.new_page(viewport={"width": 390, "height": 844})
        phone.context.add_cookies(page.context.cookies())
        phone.goto(f"{base}/queues/{table}/tasks")
        phone.screenshot(path=str(IMAGES / "web-phone.png"))


def _sign_in(page, base: str) -> None:
    page.goto(f"{base}/")
    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
