"""Process instances over HTTP (issue 42; CONTRACT.md section 8), against a real worker on
PostgreSQL, MariaDB and through the socket server: ``POST /api/v1/processes``,
``POST /api/v1/processes/{id}/calls?wait=SECONDS`` (the handler's response), the repairs
route, ``GET /api/v1/processes/{id}``, the console's process page, and the answers to bad
input (404, 409, 422, 403, 202 after the wait). The app is the one ``nsjq web`` serves
(FastAPI's TestClient); the worker is ``workers/process_worker.py`` in this process.
"""

from __future__ import annotations

import json
import re
from html import unescape
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from nsj_queue_lib.web.app import create_app
from nsj_queue_lib.web.settings import WebSettings
from tests.contract.test_async_handlers import BOTH
from tests.contract.test_durable_steps import WITH_SERVER
from tests.contract.test_processes import process_worker
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(120)

TOKEN = "admin-token-0123456789"
READONLY = "reader-token-0123456789"
SCRIPT = "<script>alert('x')</script>"


@pytest.fixture
def web(backend):
    environ = {
        "QUEUE_WEB_QUEUES": backend.table,
        "QUEUE_WEB_TOKEN": TOKEN,
        "QUEUE_WEB_READONLY_TOKEN": READONLY,
    }
    app = create_app(WebSettings.from_env(environ, dsn=backend.dsn))
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client


def task_count(backend) -> int:
    return len(backend.rows())


@WITH_SERVER
def test_a_synchronous_call_over_http_returns_the_handlers_response(backend, web):
    running = backend.run(process_worker(backend))
    started = web.post(
        "/api/v1/processes?wait=20",
        json={"process_id": "order/7", "processo": "count", "payload": {"seq": 0}},
    )
    assert started.status_code == 201, started.text
    body = started.json()
    assert (body["process_id"], body["queue"], body["response"]) == (
        "order/7",
        backend.table,
        {"n": 1},
    )
    assert body["task"]["status"] == "sucesso" and body["task"]["id_inicial"] == body["id"]

    # The id is percent-encoded in the path ('/' included).
    called = web.post(
        "/api/v1/processes/order%2F7/calls?wait=20",
        json={"processo": "count", "payload": {"seq": 1}, "prioridade": 3},
    )
    assert called.status_code == 201, called.text
    assert called.json()["response"] == {"n": 2}
    assert called.json()["task"]["status"] == "sucesso"
    assert backend.row(called.json()["id"])["prioridade"] == 3
    assert backend.row(called.json()["id"])["chave_externa"] == "order/7"

    # Without wait: the task's id at once, nothing about its outcome.
    queued = web.post(
        "/api/v1/processes/order%2F7/calls", json={"processo": "count", "payload": {}}
    )
    assert queued.status_code == 201 and queued.json()["task"] is None
    assert queued.json()["response"] is None
    wait_for(lambda: backend.row(queued.json()["id"])["status"] == "sucesso", 20, "the call")

    found = web.get("/api/v1/processes/order%2F7", params={"events": 2, "tasks": 10})
    assert found.status_code == 200, found.text
    process = found.json()
    assert process["state"] == {"n": 3, "seen": [0, 1, None]}
    assert (process["status"], process["detail"], process["corrupted"]) == (
        "counting",
        "3 calls",
        False,
    )
    assert [e["payload"]["n"] for e in process["events"]] == [2, 3]
    assert [(t["kind"], t["response"]) for t in process["tasks"]] == [
        ("start", {"n": 1}),
        ("call", {"n": 2}),
        ("call", {"n": 3}),
    ]
    # Times are ISO 8601 text, as elsewhere in the API.
    assert isinstance(process["created_at"], str) and isinstance(process["updated_at"], str)
    assert all(isinstance(t["started_at"], str) for t in process["tasks"])
    assert all(isinstance(e["created_at"], str) for e in process["events"])
    assert running.stop() == 0


@WITH_SERVER
def test_a_corrupted_process_answers_409_to_calls_and_a_repair_restores_it(backend, web):
    running = backend.run(process_worker(backend))
    assert (
        web.post(
            "/api/v1/processes?wait=20",
            json={"process_id": "c-1", "processo": "count", "payload": {}},
        ).status_code
        == 201
    )
    broke = web.post(
        "/api/v1/processes/c-1/calls?wait=20", json={"processo": "break", "payload": {}}
    )
    assert broke.status_code == 201, broke.text
    assert broke.json()["task"]["status"] == "falha" and broke.json()["response"] is None
    process = web.get("/api/v1/processes/c-1").json()
    assert process["corrupted"] and process["corrupted_by"] == broke.json()["id"]

    refused = web.post("/api/v1/processes/c-1/calls", json={"processo": "count", "payload": {}})
    assert refused.status_code == 409 and "corrupted" in refused.json()["detail"]
    repaired = web.post(
        "/api/v1/processes/c-1/repairs?wait=20", json={"processo": "fix", "payload": {}}
    )
    assert repaired.status_code == 201, repaired.text
    assert repaired.json()["response"] == "fixed"
    process = web.get("/api/v1/processes/c-1").json()
    assert not process["corrupted"] and process["status"] == "fixed"
    assert process["tasks"][-1]["kind"] == "repair"
    again = web.post(
        "/api/v1/processes/c-1/calls?wait=20", json={"processo": "count", "payload": {}}
    )
    assert again.status_code == 201 and again.json()["response"] == {"n": 2}
    assert running.stop() == 0


@BOTH
def test_bad_requests_write_nothing(backend, web):
    assert (
        web.post(
            "/api/v1/processes", json={"process_id": "v-1", "processo": "count", "payload": {}}
        ).status_code
        == 201
    )
    before = task_count(backend)
    exists = web.post(
        "/api/v1/processes", json={"process_id": "v-1", "processo": "count", "payload": {}}
    )
    assert exists.status_code == 409 and "exists" in exists.json()["detail"]
    unknown = web.post("/api/v1/processes/nobody/calls", json={"processo": "count", "payload": {}})
    assert unknown.status_code == 404
    assert (
        web.post(
            "/api/v1/processes/nobody/repairs", json={"processo": "f", "payload": {}}
        ).status_code
        == 404
    )
    assert web.get("/api/v1/processes/nobody").status_code == 404
    for body, field in (
        ({"processo": "", "payload": {}}, "processo"),
        ({"processo": "count"}, "payload"),
        ({"processo": "count", "payload": {}, "lock_key": "k"}, "lock_key"),
        ({"processo": "count", "payload": {}, "dedupe_key": "k"}, "dedupe_key"),
        ({"processo": "count", "payload": {}, "prioridade": -1}, "prioridade"),
        ({"processo": "count", "payload": {}, "queue": "public.nope"}, "queue"),
    ):
        answer = web.post("/api/v1/processes/v-1/calls", json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert field in [str(p) for e in answer.json()["detail"] for p in e["loc"]], answer.text
    for process_id in (" ", "x" * 191):
        answer = web.post(
            "/api/v1/processes", json={"process_id": process_id, "processo": "count", "payload": {}}
        )
        assert answer.status_code == 422, answer.text
    assert web.get("/api/v1/processes/%20").status_code == 422
    assert (
        web.post(
            "/api/v1/processes/v-1/calls?wait=-1", json={"processo": "c", "payload": 1}
        ).status_code
        == 422
    )
    reader = {"Authorization": f"Bearer {READONLY}"}
    for path in ("/api/v1/processes/v-1/calls", "/api/v1/processes/v-1/repairs"):
        assert (
            web.post(path, json={"processo": "c", "payload": 1}, headers=reader).status_code == 403
        )
    refused = web.post(
        "/api/v1/processes",
        json={"process_id": "v-2", "processo": "c", "payload": 1},
        headers=reader,
    )
    assert refused.status_code == 403
    assert web.get("/api/v1/processes/v-1", headers=reader).status_code == 200
    assert (
        web.get(
            "/api/v1/processes/v-1", headers={"Authorization": "Bearer nope-nope-nope"}
        ).status_code
        == 401
    )
    assert task_count(backend) == before
    # No worker runs here: a call waited for is answered after the wait with 202.
    late = web.post(
        "/api/v1/processes/v-1/calls?wait=0.3", json={"processo": "count", "payload": {}}
    )
    assert late.status_code == 202, late.text
    assert late.json()["task"] is None and late.json()["response"] is None
    assert task_count(backend) == before + 1


@BOTH
def test_the_console_shows_a_process_its_timer_and_its_timeline(backend, web):
    running = backend.run(process_worker(backend))
    start = web.post(
        "/api/v1/processes?wait=20",
        json={"process_id": SCRIPT, "processo": "count", "payload": {"seq": 0}},
    ).json()
    path = "/api/v1/processes/" + quote(SCRIPT, safe="")
    armed = web.post(
        path + "/calls?wait=20", json={"processo": "arm", "payload": {"in": 600, "label": "later"}}
    )
    assert armed.status_code == 201, armed.text
    assert running.stop() == 0
    console = path.replace("/api/v1/processes/", f"/queues/{backend.table}/processes/")
    page = web.get(console)
    assert page.status_code == 200, page.text
    html = page.text
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    assert 'id="process-status"' in html and ">counting<" in html
    state = re.search(r'<pre class="payload" id="process-state">(.*?)</pre>', html, re.S).group(1)
    assert json.loads(unescape(state)) == {"n": 1, "seen": [0]}  # pretty-printed
    timer = armed.json()["response"]
    assert f'id="timer-{timer}"' in html
    rows = re.findall(r'<tr class="process-task[^"]*" data-task-id="(\d+)" data-kind="(\w+)"', html)
    assert rows == [
        (str(start["id"]), "start"),
        (str(armed.json()["id"]), "call"),
        (str(timer), "timer"),
    ]
    assert 'data-event="counted"' in html
    partial = web.get(console + "?partial=1").text
    assert 'id="process-status"' in partial and "<html" not in partial
    # A task of the process links to it; a task of none does not.
    task_page = web.get(f"/queues/{backend.table}/tasks/{armed.json()['id']}").text
    assert 'id="process-link"' in task_page and console.split("/queues/")[1] in task_page
    assert web.get(f"/queues/{backend.table}/processes/nobody").status_code == 404
