"""HTTP API v1: enqueue, read, list, cancel and retry tasks; start, call, repair and read
process instances; pause and resume a queue or a processo; queue statistics (with the
pauses in force).

Every route needs a token when the server has one (401 otherwise, before the
body is looked at); the writing routes need the full-access token (403 with
the read-only one). Each call is one transaction (``queues.Queue``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt

from nsj_queue_lib import model
from nsj_queue_lib.db.inspection import TaskFilter
from nsj_queue_lib.exceptions import (
    ProcessCorruptedError,
    ProcessExistsError,
    WorkflowUnsupported,
)
from nsj_queue_lib.fleet.fair import FAIR_KEY_LIMIT
from nsj_queue_lib.process.ids import PROCESS_ID_LIMIT
from nsj_queue_lib.web.auth import Role
from nsj_queue_lib.web.queues import Queue, Queues, UnknownQueue

MAX_PAGE = 500
MAX_WAIT = 300.0  # seconds POST /tasks?wait= may hold a request
Status = Literal[
    "pendente",
    "agendada",
    "processando",
    "falha",
    "falha_processando",
    "sucesso",
    "cancelada",
    "aguardando",
]
assert set(Status.__args__) == set(model.STATUSES)  # type: ignore[attr-defined]


def caller(request: Request) -> Role:
    role: Role | None = request.app.state.auth.role(request)
    if role is None:
        raise HTTPException(401, "a valid token is required", {"WWW-Authenticate": "Bearer"})
    return role


def writer(role: Annotated[Role, Depends(caller)]) -> Role:
    if role is not Role.ADMIN:
        raise HTTPException(403, "this token is read-only")
    return role


def queue_named(request: Request, name: str | None, where: str = "query") -> Queue:
    """The queue ``name`` (the default one when None); 422 naming the field when unknown."""
    queues: Queues = request.app.state.queues
    try:
        return queues.get(name)
    except UnknownQueue as exc:
        raise HTTPException(
            422, [{"loc": [where, "queue"], "msg": str(exc), "type": "value_error"}]
        ) from None


def _text(limit: int) -> Any:
    return Field(None, max_length=limit)


class InsertOptions(BaseModel):
    """What ``insert_task`` and the process calls share: the processo, the payload, the
    options, and the queue (default: the first)."""

    model_config = ConfigDict(extra="forbid")

    queue: str | None = None
    processo: str = Field(min_length=1, max_length=model.TEXT_LIMITS["processo"])
    payload: Any = Field(description="any JSON value; a task's handler receives it")
    chave_externa: str | None = _text(model.TEXT_LIMITS["chave_externa"])
    origem: str | None = _text(model.TEXT_LIMITS["origem"])
    destino: str | None = _text(model.TEXT_LIMITS["destino"])
    tenant: StrictInt | None = None
    grupo_empresarial: str | None = _text(model.TEXT_LIMITS["grupo_empresarial"])
    prioridade: StrictInt | None = Field(None, ge=0, le=2**31 - 1)
    data_hora: AwareDatetime | None = Field(None, description="when it is due (default: now)")
    fair_key: str | None = Field(
        None,
        min_length=1,
        max_length=FAIR_KEY_LIMIT,
        description="claims rotate across fair keys among ready tasks of one prioridade",
    )


class EnqueueRequest(InsertOptions):
    """The arguments of ``QueueClient.insert_task``, and the queue (default: the first)."""

    dedupe_key: str | None = Field(
        None,
        min_length=1,
        max_length=model.TEXT_LIMITS["dedupe_key"],
        description="while a task with this key is unfinished, enqueue again returns its id",
    )
    lock_key: str | None = Field(
        None,
        min_length=1,
        max_length=model.TEXT_LIMITS["lock_key"],
        description="tasks with equal keys never run at the same time",
    )


class Enqueued(BaseModel):
    id: int
    queue: str
    task: dict[str, Any] | None = Field(
        None, description="with ?wait=SECONDS: get_task's view once it finished (else null)"
    )


class Cancelled(BaseModel):
    id: int
    status: str


class Retried(BaseModel):
    id: int = Field(description="the new attempt's id")


class TaskPage(BaseModel):
    tasks: list[dict[str, Any]]
    next_cursor: int | None = Field(description="pass as cursor for the next page; null: last")


router = APIRouter(prefix="/api/v1", tags=["v1"], dependencies=[Depends(caller)])
QueueParam = Annotated[str | None, Query(description="the queue table; default: the first")]


@router.post("/tasks", status_code=201, response_model=Enqueued)
def enqueue(
    body: EnqueueRequest,
    request: Request,
    response: Response,
    _: Annotated[Role, Depends(writer)],
    wait: Annotated[
        float | None,
        Query(ge=0, le=MAX_WAIT, description="seconds to wait for the task to finish"),
    ] = None,
) -> Enqueued:
    """Enqueue a task (committed). With ``wait``, answer once it finished (201, its view in
    ``task``), or after ``wait`` seconds with ``task`` null (202: it is still running)."""
    queue = queue_named(request, body.queue, "body")
    fields = body.model_dump(exclude={"queue"})
    try:
        task_id = queue.enqueue(fields)
    except (TypeError, ValueError) as exc:
        raise HTTPException(
            422, [{"loc": ["body"], "msg": str(exc), "type": "value_error"}]
        ) from None
    if wait is None:
        return Enqueued(id=task_id, queue=queue.table, task=None)
    try:
        task = queue.wait(task_id, wait)
    except TimeoutError:
        response.status_code = 202
        return Enqueued(id=task_id, queue=queue.table, task=None)
    return Enqueued(id=task_id, queue=queue.table, task=task)


@router.get("/tasks", response_model=TaskPage)
def list_tasks(
    request: Request,
    queue: QueueParam = None,
    status: Annotated[list[Status] | None, Query()] = None,
    processo: str | None = None,
    chave_externa: str | None = None,
    exhausted: bool = False,
    all_attempts: bool = False,
    cursor: Annotated[int | None, Query(ge=1)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
) -> TaskPage:
    """Each task's latest attempt (every attempt with all_attempts), newest first."""
    filters = TaskFilter(
        statuses=tuple(status or ()),
        processo=processo,
        chave_externa=chave_externa,
        all_attempts=all_attempts,
        before_id=cursor,
        exhausted=exhausted,
    )
    page = queue_named(request, queue).tasks(filters, limit)
    return TaskPage(tasks=page.tasks, next_cursor=page.next_cursor)


@router.get("/tasks/{task_id}")
def get_task(task_id: int, request: Request, queue: QueueParam = None) -> dict[str, Any]:
    """The task of any of its attempts' ids: status, progress, cancel state, every attempt."""
    return queue_named(request, queue).task(task_id)


@router.post("/tasks/{task_id}/cancel", response_model=Cancelled)
def cancel_task(
    task_id: int, request: Request, _: Annotated[Role, Depends(writer)], queue: QueueParam = None
) -> Cancelled:
    """A waiting task becomes cancelada; a running one is asked to stop (processando)."""
    return Cancelled(id=task_id, status=queue_named(request, queue).cancel(task_id))


@router.post("/tasks/{task_id}/retry", status_code=201, response_model=Retried)
def retry_task(
    task_id: int, request: Request, _: Annotated[Role, Depends(writer)], queue: QueueParam = None
) -> Retried:
    """A new attempt, due now, for a task that ran out of attempts (409 otherwise)."""
    try:
        return Retried(id=queue_named(request, queue).retry(task_id))
    except ValueError as exc:
        raise HTTPException(409, str(exc)) from None


class WorkflowCancelled(BaseModel):
    id: int
    status: str = Field(description="the workflow's status after the call")
    tasks: dict[str, str] = Field(description="each task's id: its status after the call")


@router.get("/workflows/{workflow_id}")
def get_workflow(workflow_id: int, request: Request, queue: QueueParam = None) -> dict[str, Any]:
    """A workflow: its status (running, succeeded, failed, cancelled), its tasks with their
    parents, in the order added. 501 where the queue has no workflows (SingleStore)."""
    target = queue_named(request, queue)
    try:
        return target.workflow(workflow_id)
    except WorkflowUnsupported as exc:
        raise HTTPException(501, str(exc)) from None


@router.post("/workflows/{workflow_id}/cancel", response_model=WorkflowCancelled)
def cancel_workflow(
    workflow_id: int,
    request: Request,
    _: Annotated[Role, Depends(writer)],
    queue: QueueParam = None,
) -> WorkflowCancelled:
    """Its waiting tasks become cancelada; its running ones are asked to stop."""
    target = queue_named(request, queue)
    try:
        after = target.cancel_workflow(workflow_id)
    except WorkflowUnsupported as exc:
        raise HTTPException(501, str(exc)) from None
    status = target.workflow(workflow_id)["status"]
    return WorkflowCancelled(
        id=workflow_id, status=status, tasks={str(k): v for k, v in after.items()}
    )


# -- process instances (nsj_queue_lib/process/) --

ProcessIdPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=PROCESS_ID_LIMIT,
        description="the process's id (percent-encoded; it may hold '/')",
    ),
]
WaitParam = Annotated[
    float | None,
    Query(ge=0, le=MAX_WAIT, description="seconds to wait for the task to finish"),
]
EventsParam = Annotated[int, Query(ge=0, le=1000, description="the last N events")]
TasksParam = Annotated[int, Query(ge=0, le=1000, description="the last N tasks")]


class ProcessStartRequest(InsertOptions):
    """``QueueClient.start_process``'s arguments and insert options, and the queue."""

    process_id: str = Field(min_length=1, max_length=PROCESS_ID_LIMIT)


class ProcessTask(BaseModel):
    id: int = Field(description="the task's id (wait_for_task, call_response, GET /tasks/{id})")
    queue: str
    process_id: str
    task: dict[str, Any] | None = Field(
        None, description="with ?wait=SECONDS: get_task's view once it finished (else null)"
    )
    response: Any = Field(
        None,
        description="with ?wait=SECONDS: what the handler returned (call_response), once the "
        "task succeeded; else null",
    )


def _process_fields(body: InsertOptions) -> dict[str, Any]:
    """The insert options the caller gave (an absent one keeps the process client's default,
    e.g. ``chave_externa`` = the process id)."""
    return body.model_dump(
        exclude={"queue", "process_id", "processo", "payload"}, exclude_none=True
    )


def _process_task(
    queue: Queue, process_id: str, enqueue: Any, response: Response, wait: float | None
) -> ProcessTask:
    """``enqueue()`` (a start, call or repair) answered as the tasks endpoint answers: with
    ``wait``, once the task finished (201) or after the wait (202)."""
    try:
        task_id = enqueue()
    except (ProcessExistsError, ProcessCorruptedError) as exc:
        raise HTTPException(409, str(exc)) from None
    except WorkflowUnsupported as exc:
        raise HTTPException(501, str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise HTTPException(
            422, [{"loc": ["body"], "msg": str(exc), "type": "value_error"}]
        ) from None
    found = ProcessTask(
        id=task_id, queue=queue.table, process_id=process_id, task=None, response=None
    )
    if wait is None:
        return found
    try:
        found.task, found.response = queue.wait_for_call(task_id, wait)
    except TimeoutError:
        response.status_code = 202
    return found


def _call(
    request: Request,
    response: Response,
    process_id: str,
    body: InsertOptions,
    wait: float | None,
    repair: bool,
) -> ProcessTask:
    queue = queue_named(request, body.queue, "body")
    fields = _process_fields(body)
    return _process_task(
        queue,
        process_id,
        lambda: queue.call_process(process_id, body.processo, body.payload, fields, repair),
        response,
        wait,
    )


@router.post("/processes", status_code=201, response_model=ProcessTask)
def start_process(
    body: ProcessStartRequest,
    request: Request,
    response: Response,
    _: Annotated[Role, Depends(writer)],
    wait: WaitParam = None,
) -> ProcessTask:
    """Start a process: it and its first task (kind 'start') are committed together; 409
    when the id exists. ``wait`` as for POST /tasks; ``response``: the handler's result."""
    queue = queue_named(request, body.queue, "body")
    fields = _process_fields(body)
    return _process_task(
        queue,
        body.process_id,
        lambda: queue.start_process(body.process_id, body.processo, body.payload, fields),
        response,
        wait,
    )


@router.post("/processes/{process_id:path}/calls", status_code=201, response_model=ProcessTask)
def call_process(
    process_id: ProcessIdPath,
    body: InsertOptions,
    request: Request,
    response: Response,
    _: Annotated[Role, Depends(writer)],
    wait: WaitParam = None,
) -> ProcessTask:
    """Enqueue a call to the process (it runs after the process's earlier tasks, one at a
    time). With ``wait``: once it finished, its view in ``task`` and its handler's result in
    ``response`` (201), or after the wait with both null (202). 404 for an unknown process,
    409 while it is corrupted (only repairs are accepted then)."""
    return _call(request, response, process_id, body, wait, repair=False)


@router.post("/processes/{process_id:path}/repairs", status_code=201, response_model=ProcessTask)
def repair_process(
    process_id: ProcessIdPath,
    body: InsertOptions,
    request: Request,
    response: Response,
    _: Annotated[Role, Depends(writer)],
    wait: WaitParam = None,
) -> ProcessTask:
    """Enqueue a repair: a call accepted (and run) even while the process is corrupted; its
    success ends the corruption. Answers as the calls route."""
    return _call(request, response, process_id, body, wait, repair=True)


@router.get("/processes/{process_id:path}")
def get_process(
    process_id: ProcessIdPath,
    request: Request,
    queue: QueueParam = None,
    events: EventsParam = 20,
    tasks: TasksParam = 20,
) -> dict[str, Any]:
    """``get_process``'s view: ``state``, ``status``, ``detail``, ``corrupted``, the pending
    timer (``timers``), the last events and tasks (oldest first, each task with its ``kind``
    and ``response``). 404 for an unknown process."""
    target = queue_named(request, queue)
    try:
        return target.process(process_id, events, tasks)
    except WorkflowUnsupported as exc:
        raise HTTPException(501, str(exc)) from None
    except ValueError as exc:
        raise HTTPException(
            422, [{"loc": ["path", "process_id"], "msg": str(exc), "type": "value_error"}]
        ) from None


class PauseRequest(BaseModel):
    """``QueueClient.pause``'s arguments (processo null: the whole queue), and the queue."""

    model_config = ConfigDict(extra="forbid")

    queue: str | None = None
    processo: str | None = Field(None, min_length=1, max_length=model.TEXT_LIMITS["processo"])
    until: AwareDatetime | None = None


class ResumeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    queue: str | None = None
    processo: str | None = Field(None, min_length=1, max_length=model.TEXT_LIMITS["processo"])


@router.post("/pause")
def pause(
    body: PauseRequest, request: Request, _: Annotated[Role, Depends(writer)]
) -> dict[str, Any]:
    """Pause the queue (or one processo) across every worker; running tasks finish. 501
    where the database has no pauses (SingleStore)."""
    queue = queue_named(request, body.queue, "body")
    try:
        queue.pause(body.processo, body.until)
    except NotImplementedError as exc:
        raise HTTPException(501, str(exc)) from None
    return {"queue": queue.table, "paused": queue.paused()}


@router.post("/resume")
def resume(
    body: ResumeRequest, request: Request, _: Annotated[Role, Depends(writer)]
) -> dict[str, Any]:
    """End the pause of the queue (or of one processo); ``was_paused`` says if it had one."""
    queue = queue_named(request, body.queue, "body")
    try:
        was = queue.resume(body.processo)
    except NotImplementedError as exc:
        raise HTTPException(501, str(exc)) from None
    return {"queue": queue.table, "was_paused": was, "paused": queue.paused()}


@router.get("/queues")
def list_queues(request: Request) -> list[dict[str, Any]]:
    """Every queue's statistics."""
    queues: Queues = request.app.state.queues
    return [queues.get(name).stats() for name in queues.names]


@router.get("/queues/{queue}/stats")
def queue_stats(queue: str, request: Request) -> dict[str, Any]:
    """Tasks waiting per status, the oldest ready one's age, the last hour's settled ones."""
    try:
        return request.app.state.queues.get(queue).stats()
    except UnknownQueue as exc:
        raise HTTPException(404, str(exc)) from None
