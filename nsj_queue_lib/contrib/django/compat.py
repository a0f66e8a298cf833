"""The one place that picks Django's task framework: ``django.tasks`` (Django 6 and later)
when it exists, else the ``django-tasks`` backport (``django_tasks``, for Django 5.2).
Every other module of the integration imports these names from here."""

from __future__ import annotations

try:
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django before 6: the backport
    from django_tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        task,
        task_backends,
    )
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import (
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import (
        InvalidTaskError as InvalidTask,
    )
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import (
        task_enqueued,
        task_finished,
        task_started,
    )

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
