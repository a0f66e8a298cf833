"""A task's attempts as Django's ``TaskResult``, and the return value in ``mensagem``.

Statuses: 'pendente', 'agendada' (a retry due later) and 'aguardando' (waits for its
parents) are READY; 'processando' is RUNNING; 'sucesso' is SUCCESSFUL; 'falha',
'falha_processando' and 'cancelada' as the latest attempt (no retry follows) are FAILED.

The return value is stored as JSON in the successful attempt's ``mensagem``, when that
text fits the column (500 characters); a longer one is not stored (its ``mensagem``
says so, and ``return_value`` is None). Each failed attempt gives one ``TaskError``:
the worker stores an error as ``"<exception class>: <text>"``, and the Django worker
names the class by its import path, which becomes ``exception_class_path``; the
``traceback`` is that ``mensagem`` (the worker logs the full traceback).
"""

from __future__ import annotations

import builtins
import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nsj_queue_lib import exceptions, model
from nsj_queue_lib.contrib.django.compat import Task, TaskError, TaskResult, TaskResultStatus

logger = logging.getLogger("nsj_queue_lib.contrib.django")

_STATUS = {
    model.PENDENTE: TaskResultStatus.READY,
    model.AGENDADA: TaskResultStatus.READY,
    "aguardando": TaskResultStatus.READY,
    model.PROCESSANDO: TaskResultStatus.RUNNING,
    model.SUCESSO: TaskResultStatus.SUCCESSFUL,
    model.FALHA: TaskResultStatus.FAILED,
    model.FALHA_PROCESSANDO: TaskResultStatus.FAILED,
    model.CANCELADA: TaskResultStatus.FAILED,
}
_FINISHED = (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
_ERROR_STATUSES = (model.FALHA, model.FALHA_PROCESSANDO, model.CANCELADA)
_CLASS_PREFIX = re.compile(r"^([A-Za-z_][\w.]*): ")
NOT_STORED = "return value not stored: its JSON has {size} characters, more than {limit}"


def encode_return_value(value: Any) -> str:
    """The ``mensagem`` of a task function's return value: its JSON when it fits."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if len(text) <= model.MENSAGEM_LIMIT:
        return text
    message = NOT_STORED.format(size=len(text), limit=model.MENSAGEM_LIMIT)
    logger.warning("%s", message)
    return message


def decode_return_value(mensagem: str | None) -> Any:
    try:
        return json.loads(mensagem or "")
    except ValueError:
        return None  # a value too long to keep, or a row no Django worker completed


def task_status(status: str) -> TaskResultStatus:
    return _STATUS.get(status, TaskResultStatus.READY)


def task_result(
    task: Task, result_id: str, call: Mapping[str, Any], attempts: Sequence[Mapping[str, Any]]
) -> TaskResult:
    """The result of a task from its attempts (oldest first, as ``task_attempts`` reads them)."""
    latest = attempts[-1]
    status = task_status(str(latest["status"]))
    started = [a for a in attempts if a.get("started_at") is not None]
    result = TaskResult(
        task=task,
        id=result_id,
        status=status,
        enqueued_at=attempts[0]["data_hora_inicial"],
        started_at=started[0]["started_at"] if started else None,
        last_attempted_at=started[-1]["started_at"] if started else None,
        finished_at=latest.get("finished_at") if status in _FINISHED else None,
        args=call["args"],
        kwargs=call["kwargs"],
        backend=task.backend,
        errors=[_error(a["mensagem"]) for a in attempts if a["status"] in _ERROR_STATUSES],
        worker_ids=[str(a["worker"]) for a in started if a.get("worker")],
    )
    if status == TaskResultStatus.SUCCESSFUL:
        # A frozen dataclass whose return value only its backend sets, as Django's own do.
        object.__setattr__(result, "_return_value", decode_return_value(latest["mensagem"]))
    return result


def _error(mensagem: str | None) -> TaskError:
    text = mensagem or ""
    return TaskError(exception_class_path=_class_path(text), traceback=text)


def _class_path(text: str) -> str:
    """The import path of the exception class a failed attempt's ``mensagem`` names."""
    found = _CLASS_PREFIX.match(text)
    name = found.group(1) if found else ""
    if "." in name:
        return name  # a Django task's own exception, named by its path by the worker
    for module in (builtins, exceptions):
        candidate = getattr(module, name, None) if name else None
        if isinstance(candidate, type) and issubclass(candidate, BaseException):
            return f"{module.__name__}.{name}"
    if text.startswith("cancelled"):  # model.CANCELLED_BEFORE_IT_RAN, CANCELLED_WHILE_RUNNING
        return f"{exceptions.__name__}.TaskCancelled"
    return "builtins.Exception"  # a timeout, a lost worker: no exception of the task's
