"""The HTML console: overview, task list, task page, dead letters, workflows, processes,
login.

Pages are rendered on the server by Jinja2 with autoescape on, so no payload,
message or header value reaches the page unescaped; ``static/console.js``
only refreshes fragments the server rendered and asks for confirmations.
Every form POST carries the CSRF token of the ``nsjq_csrf`` cookie.
"""

from __future__ import annotations

import datetime
import html
import json
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, select_autoescape

from nsj_queue_lib import model
from nsj_queue_lib.db.inspection import TaskFilter
from nsj_queue_lib.exceptions import NotFoundError, WorkflowUnsupported
from nsj_queue_lib.runtime.registry import STALE_SECONDS
from nsj_queue_lib.web import auth, graph, humane, states
from nsj_queue_lib.web.auth import Role
from nsj_queue_lib.web.queues import Queue, Queues, UnknownQueue
from nsj_queue_lib.web.timeline import durations, timeline

TEMPLATES = Path(__file__).parent / "templates"
PAGE_SIZE = 50
# The payload shown on a task page: its first bytes, pretty-printed.
PAYLOAD_SHOWN = 16 * 1024
CHART_HEIGHT = 60
# A process page's tasks and events: the last ones of each.
PROCESS_RECENT = 50
# A response or an event's payload in a timeline row: its first characters.
SHOWN_INLINE = 240
FAILED = (model.FALHA, model.FALHA_PROCESSANDO)

router = APIRouter(include_in_schema=False)


def templates() -> Jinja2Templates:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True)
    )
    env.globals["statuses"] = model.STATUSES
    env.globals["states"] = states.BY_NAME
    env.filters.update(humane.FILTERS)
    env.filters["segment"] = lambda value: quote(str(value), safe="")
    return Jinja2Templates(env=env)


class LoginRequired(Exception):
    pass


def _page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    """Render ``name``; sets the CSRF cookie the page's forms echo."""
    csrf = request.cookies.get(auth.CSRF_COOKIE) or auth.new_csrf_token()
    queues: Queues = request.app.state.queues
    base = {
        "csrf": csrf,
        "queues": queues.names,
        "auth_required": request.app.state.auth.required,
        # What relative times are measured from; console.js keeps them current from it.
        "now": datetime.datetime.now(datetime.timezone.utc),
    }
    response = request.app.state.templates.TemplateResponse(
        request, name, {**base, **context}, status_code=status
    )
    _set_cookie(response, auth.CSRF_COOKIE, csrf)
    return response


def _set_cookie(response: Response, name: str, value: str) -> None:
    response.set_cookie(name, value, httponly=True, samesite="strict", path="/")


def _role(request: Request) -> Role | Response:
    role: Role | None = request.app.state.auth.role(request)
    if role is None:
        return RedirectResponse("/login?" + urlencode({"next": request.url.path}), 303)
    return role


def _queue(request: Request, name: str) -> Queue:
    try:
        return request.app.state.queues.get(name)
    except UnknownQueue:
        raise NotFoundError(f"unknown queue {name!r}") from None


def _refused(request: Request, csrf: str) -> Response | None:
    """The answer to a console POST that may not act (signed out, bad CSRF token, read-only
    access), or None."""
    role = _role(request)
    if isinstance(role, Response):
        return role
    if not auth.csrf_matches(request, csrf):
        return HTMLResponse("refused: the form's CSRF token does not match", 403)
    if role is not Role.ADMIN:
        return HTMLResponse("refused: read-only access", 403)
    return None


# -- login -------------------------------------------------------------------------------


@router.get("/login")
def login_form(request: Request, next: str = "/") -> Response:
    return _page(request, "login.html", {"next": _local(next), "error": None})


@router.post("/login")
def login(
    request: Request,
    token: Annotated[str, Form()],
    csrf: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/",
) -> Response:
    checker: auth.Auth = request.app.state.auth
    role = checker.role_of_token(token) if checker.required else None
    if not auth.csrf_matches(request, csrf) or role is None:
        context = {"next": _local(next), "error": "Wrong token (or the form expired)."}
        return _page(request, "login.html", context, 401)
    response = RedirectResponse(_local(next), 303)
    _set_cookie(response, auth.SESSION_COOKIE, checker.session_cookie(role))
    return response


@router.post("/logout")
def logout(request: Request, csrf: Annotated[str, Form()] = "") -> Response:
    if not auth.csrf_matches(request, csrf):
        return HTMLResponse("refused: the form's CSRF token does not match", 403)
    response = RedirectResponse("/login", 303)
    response.delete_cookie(auth.SESSION_COOKIE, path="/")
    return response


def _local(target: str) -> str:
    """Only a path of this site (an open redirect otherwise)."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


# -- pages -------------------------------------------------------------------------------


@router.get("/")
def overview(request: Request) -> Response:
    role = _role(request)
    if isinstance(role, Response):
        return role
    queues: Queues = request.app.state.queues
    cards = [dict(queues.get(n).stats()) for n in queues.names]
    for card in cards:
        card["chart"] = chart(card["series"])
    context = {"cards": cards, "role": role.value, "stale_seconds": STALE_SECONDS}
    return _page(request, "overview.html", context)


def chart(series: list[dict[str, int]]) -> dict[str, Any]:
    """Bar heights of the throughput chart: settled and failed per bucket, scaled."""
    top = max([p["done"] + p["failed"] for p in series] + [1])
    bars = []
    for index, point in enumerate(series):
        done = round(point["done"] * CHART_HEIGHT / top)
        failed = round(point["failed"] * CHART_HEIGHT / top)
        bars.append({**point, "x": index * 10, "done_height": done, "failed_height": failed})
    return {"bars": bars, "height": CHART_HEIGHT, "width": len(series) * 10, "top": top}


@router.get("/queues/{name}/tasks")
def task_list(
    request: Request,
    name: str,
    status: str = "",
    processo: str = "",
    chave_externa: str = "",
    cursor: int | None = None,
    exhausted: bool = False,
    partial: bool = False,
) -> Response:
    role = _role(request)
    if isinstance(role, Response):
        return role
    queue = _queue(request, name)
    statuses = tuple(s for s in status.split(",") if s in model.STATUSES)
    filters = TaskFilter(
        statuses=statuses,
        processo=processo or None,
        chave_externa=chave_externa or None,
        before_id=cursor,
        exhausted=exhausted,
    )
    page = queue.tasks(filters, PAGE_SIZE)
    now = datetime.datetime.now(datetime.timezone.utc)
    for row in page.tasks:
        row["waited_s"], row["ran_s"] = durations(row, now)
    query = {"status": ",".join(statuses), "processo": processo, "chave_externa": chave_externa}
    context = {
        "queue": queue.table,
        "page": page,
        "filters": query,
        "exhausted": exhausted,
        "next_url": None
        if page.next_cursor is None
        else "?" + urlencode({**query, "exhausted": int(exhausted), "cursor": page.next_cursor}),
        "refresh_url": "?" + urlencode({**query, "exhausted": int(exhausted), "partial": 1}),
        "role": role.value,
        "retried": request.query_params.get("retried"),
    }
    return _page(request, "task_rows.html" if partial else "tasks.html", context)


@router.get("/queues/{name}/tasks/{task_id}")
def task_page(request: Request, name: str, task_id: int, partial: bool = False) -> Response:
    role = _role(request)
    if isinstance(role, Response):
        return role
    task = _queue(request, name).task(task_id)
    now = datetime.datetime.now(datetime.timezone.utc)
    for attempt in task["attempts"]:
        attempt["waited_s"], attempt["ran_s"] = durations(attempt, now)
    text = json.dumps(task.pop("payload"), indent=2, ensure_ascii=False, default=str)
    shown = text.encode()[:PAYLOAD_SHOWN].decode(errors="ignore")
    context = {
        "queue": name,
        "task": task,
        "payload": shown,
        "payload_bytes": len(text.encode()),
        "payload_cut": len(shown) < len(text),
        "role": role.value,
        "active": task["status"] in model.ACTIVE_STATUSES,
        "timeline": timeline(task["attempts"], now),
        "last_error": last_error(task["attempts"], task["id_inicial"]),
        "latest": next((a for a in task["attempts"] if a["id"] == task["id"]), None),
        "workflow_id": None if partial else _queue(request, name).workflow_of_task(task_id),
        "process": None if partial else _queue(request, name).process_of_task(task_id),
    }
    return _page(request, "task_state.html" if partial else "task.html", context)


@router.get("/queues/{name}/workflows/{workflow_id}")
def workflow_page(request: Request, name: str, workflow_id: int, partial: bool = False) -> Response:
    """A workflow's graph (web/graph.py), each task coloured by its status, and its tasks;
    the graph refreshes itself as they run."""
    role = _role(request)
    if isinstance(role, Response):
        return role
    queue = _queue(request, name)
    try:
        found = queue.workflow(workflow_id)
    except WorkflowUnsupported as exc:
        return HTMLResponse(f"no workflows here: {html.escape(str(exc))}", 501)
    context = {
        "queue": name,
        "workflow": found,
        "graph": graph.layout(found["tasks"]),
        "max_drawn": graph.MAX_DRAWN,
        "role": role.value,
        "active": found["status"] == "running",
    }
    return _page(request, "workflow_state.html" if partial else "workflow.html", context)


@router.get("/queues/{name}/processes/{process_id:path}")
def process_page(request: Request, name: str, process_id: str, partial: bool = False) -> Response:
    """A process instance: its state, status, detail, corruption, pending timer, and a
    timeline of its tasks and events; refreshes itself."""
    role = _role(request)
    if isinstance(role, Response):
        return role
    queue = _queue(request, name)
    try:
        found = queue.process(process_id, PROCESS_RECENT, PROCESS_RECENT)
    except WorkflowUnsupported as exc:
        return HTMLResponse(f"no processes here: {html.escape(str(exc))}", 501)
    except ValueError as exc:
        return HTMLResponse(f"no such process: {html.escape(str(exc))}", 404)
    now = datetime.datetime.now(datetime.timezone.utc)
    text = json.dumps(found["state"], indent=2, ensure_ascii=False, sort_keys=True)
    shown = text.encode()[:PAYLOAD_SHOWN].decode(errors="ignore")
    context = {
        "queue": name,
        "process": found,
        "state_text": shown,
        "state_cut": len(shown) < len(text),
        "timer": found["timers"][0] if found["timers"] else None,
        "moments": process_timeline(found["tasks"], found["events"], now),
        "recent": PROCESS_RECENT,
        "role": role.value,
    }
    return _page(request, "process_state.html" if partial else "process.html", context)


def process_timeline(
    tasks: list[dict[str, Any]], events: list[dict[str, Any]], now: datetime.datetime
) -> list[dict[str, Any]]:
    """A process's tasks and events in the order they happened: a task at its start (or,
    not started, when it is due), an event when it was written (its task's run, after the
    task's row)."""
    moments: list[tuple[datetime.datetime, int, int, dict[str, Any]]] = []
    for task in tasks:
        waited, ran = durations(task, now)
        at = task["started_at"] or task["data_hora"] or task["created_at"]
        row = dict(task, what="task", at=at, waited_s=waited, ran_s=ran)
        row["response_text"] = _json_text(task["response"])
        moments.append((humane.instant(at) or now, 0, int(task["id"]), row))
    for event in events:
        row = dict(event, what="event", at=event["created_at"])
        row["payload_text"] = _json_text(event["payload"])
        moments.append((humane.instant(event["created_at"]) or now, 1, int(event["id"]), row))
    return [row for *_, row in sorted(moments, key=lambda m: m[:3])]


def _json_text(value: Any) -> str:
    if value is None:
        return ""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= SHOWN_INLINE else text[: SHOWN_INLINE - 1] + "…"


@router.post("/queues/{name}/workflows/{workflow_id}/cancel")
def workflow_cancel(
    request: Request, name: str, workflow_id: int, csrf: Annotated[str, Form()] = ""
) -> Response:
    refused = _refused(request, csrf)
    if refused is not None:
        return refused
    _queue(request, name).cancel_workflow(workflow_id)
    return RedirectResponse(f"/queues/{name}/workflows/{workflow_id}", 303)


def last_error(attempts: list[dict[str, Any]], task_id: int) -> dict[str, Any] | None:
    """The latest failed attempt of the task ``task_id`` (not of its dead letter), or None."""
    failed = [
        a for a in attempts if a["status"] in FAILED and (a["id_inicial"] or a["id"]) == task_id
    ]
    return failed[-1] if failed else None


@router.post("/queues/{name}/tasks/{task_id}/{action}")
def task_action(
    request: Request, name: str, task_id: int, action: str, csrf: Annotated[str, Form()] = ""
) -> Response:
    refused = _refused(request, csrf)
    if refused is not None:
        return refused
    queue = _queue(request, name)
    if action == "cancel":
        queue.cancel(task_id)
    elif action == "retry":
        try:
            queue.retry(task_id)
        except ValueError as exc:
            return HTMLResponse(f"not retried: {html.escape(str(exc))}", 409)
    else:
        raise NotFoundError(f"no action {action!r}")
    return RedirectResponse(f"/queues/{name}/tasks/{task_id}", 303)


@router.post("/queues/{name}/{action}")
def pause_action(
    request: Request,
    name: str,
    action: str,
    csrf: Annotated[str, Form()] = "",
    processo: Annotated[str, Form()] = "",
) -> Response:
    """The overview's Pause and Resume buttons: the whole queue, or one processo."""
    refused = _refused(request, csrf)
    if refused is not None:
        return refused
    queue = _queue(request, name)
    target = processo or None
    if action == "pause":
        queue.pause(target, None)
    elif action == "resume":
        queue.resume(target)
    else:
        raise NotFoundError(f"no action {action!r}")
    return RedirectResponse("/", 303)


@router.post("/queues/{name}/dead-letters/retry")
def bulk_retry(
    request: Request,
    name: str,
    csrf: Annotated[str, Form()] = "",
    ids: Annotated[list[int] | None, Form()] = None,
) -> Response:
    """Retry every chosen task, each in its own transaction; one already retried is skipped."""
    refused = _refused(request, csrf)
    if refused is not None:
        return refused
    queue = _queue(request, name)
    retried = 0
    for task_id in ids or []:
        try:
            queue.retry(task_id)
        except (NotFoundError, ValueError):
            continue
        retried += 1
    target = f"/queues/{name}/tasks?" + urlencode({"exhausted": 1, "retried": retried})
    return RedirectResponse(target, 303)
