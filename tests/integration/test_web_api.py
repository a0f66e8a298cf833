"""The web server's API and console over real PostgreSQL and MariaDB (FastAPI's TestClient).

The application is the one ``nsjq web`` serves, built from the same settings;
tasks are put in their statuses by the store as a worker does
(``test_cli.populate``). Bad input must leave the queue as it was.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.web.app import create_app
from nsj_queue_lib.web.console import CHART_HEIGHT, chart
from nsj_queue_lib.web.settings import WebSettings
from tests.integration import test_cli
from tests.integration.test_cli import Queue, _driver, populate

TOKEN = "admin-token-0123456789"
READONLY = "reader-token-0123456789"
SCRIPT = "<script>alert('x')</script>"


# The same queues as nsjq's tests: one on PostgreSQL, one on MariaDB.
queue = test_cli.queue


def settings_for(queue: Queue, **extra: str) -> WebSettings:
    environ = {"QUEUE_WEB_QUEUES": queue.table, "QUEUE_WEB_TOKEN": TOKEN, **extra}
    return WebSettings.from_env(environ, dsn=queue.dsn)


@pytest.fixture
def web(queue):
    app = create_app(
        settings_for(queue, QUEUE_WEB_READONLY_TOKEN=READONLY, QUEUE_WEB_MAX_BODY="4096")
    )
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client


def rows(queue: Queue) -> int:
    conn = _driver(queue).connect(autocommit=True)
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT count(*) FROM {queue.table}")
        return int(cur.fetchone()[0])
    finally:
        close_quietly(conn)


def enqueue(web, **body):
    return web.post("/api/v1/tasks", json={"processo": "p", "payload": {"n": 1}, **body})


def test_enqueue_get_list_cancel(web, queue):
    created = enqueue(web, payload={"html": SCRIPT}, chave_externa="k1", prioridade=5)
    assert created.status_code == 201, created.text
    task_id = created.json()["id"]
    assert created.json()["queue"] == queue.table

    task = web.get(f"/api/v1/tasks/{task_id}").json()
    assert task["status"] == "pendente" and task["cancel_requested"] is False
    assert task["payload"] == {"html": SCRIPT}
    assert [a["id"] for a in task["attempts"]] == [task_id]

    listed = web.get("/api/v1/tasks", params={"status": "pendente", "chave_externa": "k1"}).json()
    assert [t["id"] for t in listed["tasks"]] == [task_id] and listed["next_cursor"] is None
    stats = web.get(f"/api/v1/queues/{queue.table}/stats").json()
    assert stats["waiting"]["pendente"] == 1

    cancelled = web.post(f"/api/v1/tasks/{task_id}/cancel")
    assert cancelled.json() == {"id": task_id, "status": "cancelada"}
    assert web.get(f"/api/v1/tasks/{task_id}").json()["status"] == "cancelada"
    assert web.get("/api/v1/tasks/999999999").status_code == 404


def test_enqueue_with_dedupe_key_is_idempotent_and_lock_key_is_stored(web, queue):
    first = enqueue(web, dedupe_key="pedido-42", lock_key="cliente-7")
    again = enqueue(web, dedupe_key="pedido-42", payload={"other": True})
    assert first.status_code == again.status_code == 201, again.text
    assert again.json()["id"] == first.json()["id"]
    assert rows(queue) == 1
    assert web.get(f"/api/v1/tasks/{first.json()['id']}").json()["payload"] == {"n": 1}
    conn = _driver(queue).connect(autocommit=True)
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT lock_key, dedupe_key FROM {queue.table}")
        assert tuple(cur.fetchone()) == ("cliente-7", "pedido-42")
    finally:
        close_quietly(conn)


def test_retry_attempts_and_cursor_pages(web, queue):
    tasks = populate(queue)
    stats = web.get(f"/api/v1/queues/{queue.table}/stats").json()
    assert stats["waiting"] == {"pendente": 3, "agendada": 0, "processando": 1}
    assert (stats["last_hour"]["sucesso"], stats["last_hour"]["falha"]) == (1, 2)
    assert [(p["done"], p["failed"]) for p in stats["series"]][-1] == (1, 2)
    broken = web.get(f"/api/v1/tasks/{tasks['broken']}").json()
    assert [a["status"] for a in broken["attempts"] if not a["dead"]] == ["falha", "falha"]
    exhausted = web.get("/api/v1/tasks", params={"exhausted": "true"}).json()["tasks"]
    assert [t["id"] for t in exhausted] == [tasks["broken_2"]]

    retried = web.post(f"/api/v1/tasks/{tasks['broken']}/retry")
    assert retried.status_code == 201, retried.text
    assert web.get(f"/api/v1/tasks/{tasks['broken']}").json()["id"] == retried.json()["id"]
    again = web.post(f"/api/v1/tasks/{tasks['broken']}/retry")
    assert again.status_code == 409 and "only a task that ran out" in again.json()["detail"]

    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = web.get("/api/v1/tasks", params=params).json()
        seen += [t["id"] for t in page["tasks"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    everything = web.get("/api/v1/tasks", params={"limit": 500}).json()["tasks"]
    assert seen == [t["id"] for t in everything] and len(seen) == len(set(seen)) >= 5


def test_enqueue_with_a_fair_key_stores_it(web, queue):
    response = enqueue(web, fair_key="tenant-42")
    assert response.status_code == 201, response.text
    conn = _driver(queue).connect(autocommit=True)
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT fair_key FROM {queue.table}")
        assert tuple(cur.fetchone()) == ("tenant-42",)
    finally:
        close_quietly(conn)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"queue": "public.no_such_queue"}, "queue"),
        ({"prioridade": -1}, "prioridade"),
        ({"processo": ""}, "processo"),
        ({"tenant": "7"}, "tenant"),
        ({"data_hora": "2026-01-01T00:00:00"}, "data_hora"),
        ({"lock_key": ""}, "lock_key"),
        ({"dedupe_key": "x" * 201}, "dedupe_key"),
        ({"fair_key": ""}, "fair_key"),
        ({"fair_key": 7}, "fair_key"),
    ],
)
def test_bad_fields_are_422_naming_the_field_and_write_nothing(web, queue, body, field):
    before = rows(queue)
    response = enqueue(web, **body)
    assert response.status_code == 422, response.text
    assert field in [str(part) for error in response.json()["detail"] for part in error["loc"]]
    assert rows(queue) == before


def test_invalid_json_oversize_and_bad_tokens_write_nothing(web, queue):
    before = rows(queue)
    bad_json = web.post(
        "/api/v1/tasks", content=b'{"processo": "p", ', headers={"Content-Type": "application/json"}
    )
    assert bad_json.status_code == 422
    oversize = enqueue(web, payload="x" * 5000)
    assert oversize.status_code == 413
    for headers in ({"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": ""}):
        refused = web.post("/api/v1/tasks", json={"processo": "p", "payload": 1}, headers=headers)
        assert refused.status_code == 401
    reader = {"Authorization": f"Bearer {READONLY}"}
    assert (
        web.post("/api/v1/tasks", json={"processo": "p", "payload": 1}, headers=reader).status_code
        == 403
    )
    assert web.get("/api/v1/tasks", headers=reader).status_code == 200
    assert web.get("/api/v1/tasks", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert web.get("/api/v1/tasks", params={"queue": "x.y"}).json()["detail"][0]["loc"] == [
        "query",
        "queue",
    ]
    assert rows(queue) == before


def test_console_escapes_payloads_and_guards_its_forms(web, queue):
    task_id = enqueue(web, payload={"html": SCRIPT}, processo=SCRIPT[:40]).json()["id"]
    page = web.get(f"/queues/{queue.table}/tasks/{task_id}")
    assert page.status_code == 200
    assert "<script>alert" not in page.text and "&lt;script&gt;alert" in page.text
    listing = web.get(f"/queues/{queue.table}/tasks")
    assert "<script>alert" not in listing.text and f">{task_id}<" in listing.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"

    action = f"/queues/{queue.table}/tasks/{task_id}/cancel"
    assert web.post(action, data={"csrf": "forged"}).status_code == 403
    assert web.get(f"/api/v1/tasks/{task_id}").json()["status"] == "pendente"
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    cross = web.post(action, data={"csrf": csrf}, headers={"Origin": "https://evil.example"})
    assert cross.status_code == 403
    done = web.post(action, data={"csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303
    assert web.get(f"/api/v1/tasks/{task_id}").json()["status"] == "cancelada"
    overview = web.get("/")
    assert overview.status_code == 200 and "<svg" in overview.text


def test_console_login_sets_an_httponly_cookie(queue):
    with TestClient(create_app(settings_for(queue))) as browser:
        assert browser.get("/", follow_redirects=False).status_code == 303
        form = browser.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
        wrong = browser.post("/login", data={"token": "x" * 20, "csrf": csrf})
        assert wrong.status_code == 401
        signed = browser.post("/login", data={"token": TOKEN, "csrf": csrf}, follow_redirects=False)
        assert signed.status_code == 303
        cookie = signed.headers["set-cookie"]
        assert "nsjq_session=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert TOKEN not in cookie
        assert browser.get("/").status_code == 200
        assert browser.get("/info").json()["access"] == "admin"


def test_health_answers_without_a_database():
    settings = WebSettings.from_env(
        {"QUEUE_TABLE": "public.q", "QUEUE_WEB_TOKEN": TOKEN},
        dsn="host=127.0.0.1 port=1 user=nobody dbname=none",
    )
    with TestClient(create_app(settings)) as client:
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/info").status_code == 401
        info = client.get("/info", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        assert info["queues"] == ["public.q"] and info["version"]
        assert client.get("/openapi.json").json()["paths"]["/api/v1/tasks"]


@pytest.mark.parametrize(
    ("environ", "variable"),
    [
        ({"QUEUE_TABLE": "public.q", "QUEUE_WEB_HOST": "0.0.0.0"}, "QUEUE_WEB_HOST"),
        ({"QUEUE_TABLE": "public.q", "QUEUE_WEB_TOKEN": "short"}, "QUEUE_WEB_TOKEN"),
        ({"QUEUE_WEB_QUEUES": "public.q,bad name"}, "QUEUE_WEB_QUEUES"),
        ({"QUEUE_TABLE": "public.q", "QUEUE_WEB_PORT": "http"}, "QUEUE_WEB_PORT"),
    ],
)
def test_bad_settings_name_the_variable(environ, variable):
    with pytest.raises(ConfigError) as caught:
        WebSettings.from_env(environ, dsn="host=127.0.0.1 dbname=test")
    assert variable in caught.value.problems


def test_the_chart_scales_the_busiest_bucket_to_its_height():
    series = [
        {"minutes_ago": 5 * (3 - i), "done": d, "failed": f}
        for i, (d, f) in enumerate([(0, 0), (3, 0), (6, 1)])
    ]
    bars = chart(series)["bars"]
    assert [b["done_height"] + b["failed_height"] for b in bars] == [0, 26, CHART_HEIGHT]
    assert (bars[2]["done"], bars[2]["failed"]) == (6, 1)


def test_the_server_refuses_to_start_on_a_bad_setting():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DB_", "DATABASE_", "QUEUE_"))}
    env.update(QUEUE_TABLE="public.q", QUEUE_WEB_HOST="0.0.0.0", DB_DSN="host=127.0.0.1 dbname=x")
    for argv in (["-m", "nsj_queue_lib.web"], ["-m", "nsj_queue_lib", "web"]):
        done = subprocess.run(
            [sys.executable, *argv], env=env, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 2, done.stderr
        assert "QUEUE_WEB_HOST" in done.stderr and "QUEUE_WEB_TOKEN" in done.stderr


def test_pause_and_resume_through_the_api_and_the_console(web, queue):
    stats = web.get(f"/api/v1/queues/{queue.table}/stats").json()
    assert stats["paused"] == []
    paused = web.post("/api/v1/pause", json={"processo": "p", "until": "2030-01-02T03:04:05+00:00"})
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused"] == [{"processo": "p", "until": "2030-01-02T03:04:05+00:00"}]
    assert web.post("/api/v1/pause", json={"until": "2030-01-02T03:04:05"}).status_code == 422
    assert web.post("/api/v1/pause", json={}).json()["paused"][0] == {
        "processo": None,
        "until": None,
    }
    readonly = web.post("/api/v1/resume", json={}, headers={"Authorization": f"Bearer {READONLY}"})
    assert readonly.status_code == 403
    # The console shows the pauses and offers Resume to an admin.
    overview = web.get("/")
    assert "PAUSED: the whole queue until resumed" in overview.text
    assert 'id="resume-queue"' in overview.text and 'id="pause-queue"' not in overview.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', overview.text).group(1)
    assert web.post(f"/queues/{queue.table}/resume", data={"csrf": "forged"}).status_code == 403
    done = web.post(f"/queues/{queue.table}/resume", data={"csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303
    assert 'id="pause-queue"' in web.get("/").text
    resumed = web.post("/api/v1/resume", json={"processo": "p"}).json()
    assert resumed["was_paused"] is True and resumed["paused"] == []


def test_enqueue_with_wait_answers_once_the_task_finished_or_202(web, queue):
    """POST /tasks?wait=SECONDS: no worker runs the task here, so the answer comes after the
    wait with task null (202); a task cancelled meanwhile is answered at once (201)."""
    started = __import__("time").monotonic()
    answer = web.post("/api/v1/tasks?wait=0.3", json={"processo": "p", "payload": {"n": 1}})
    assert answer.status_code == 202, answer.text
    assert answer.json()["task"] is None
    assert __import__("time").monotonic() - started >= 0.3
    task_id = answer.json()["id"]
    assert web.post(f"/api/v1/tasks/{task_id}/cancel").json()["status"] == "cancelada"
    assert (
        web.post("/api/v1/tasks?wait=-1", json={"processo": "p", "payload": {"n": 1}}).status_code
        == 422
    )
