"""nsj_queue_lib: a job queue in a database table.

Public names are loaded lazily, so importing the package stays cheap and never
touches the environment, the network or a database. ``__version__`` is the
installed distribution's version (``pyproject.toml`` is its one source), read
on first use; "0+unknown" when the package runs from a tree that was never
installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time the names load on first use
    __version__: str
    from nsj_queue_lib.context import TaskContext, current_task
    from nsj_queue_lib.exceptions import ConfigError, PermanentError, TaskCancelled
    from nsj_queue_lib.queue_client import QueueClient
    from nsj_queue_lib.settings import Settings
    from nsj_queue_lib.task import Task
    from nsj_queue_lib.worker_base import WorkerBase
    from nsj_queue_lib.worker_group import WorkerGroup, run_workers
    from nsj_queue_lib.worker_pub_sub_base import DeadSubscriber, Subscriber, WorkerPubSubBase
    from nsj_queue_lib.worker_webhook import WorkerWebhook
    from nsj_queue_lib.workflow.builder import Workflow

__all__ = [
    "QueueClient",
    "WorkerBase",
    "WorkerPubSubBase",
    "Subscriber",
    "DeadSubscriber",
    "WorkerWebhook",
    "Settings",
    "ConfigError",
    "Task",
    "PermanentError",
    "current_task",
    "TaskContext",
    "TaskCancelled",
    "WorkerGroup",
    "run_workers",
    "Workflow",
]

_LOCATIONS = {
    "QueueClient": "nsj_queue_lib.queue_client",
    "WorkerBase": "nsj_queue_lib.worker_base",
    "WorkerPubSubBase": "nsj_queue_lib.worker_pub_sub_base",
    "Subscriber": "nsj_queue_lib.worker_pub_sub_base",
    "DeadSubscriber": "nsj_queue_lib.worker_pub_sub_base",
    "WorkerWebhook": "nsj_queue_lib.worker_webhook",
    "Settings": "nsj_queue_lib.settings",
    "ConfigError": "nsj_queue_lib.exceptions",
    "Task": "nsj_queue_lib.task",
    "PermanentError": "nsj_queue_lib.exceptions",
    "current_task": "nsj_queue_lib.context",
    "TaskContext": "nsj_queue_lib.context",
    "TaskCancelled": "nsj_queue_lib.exceptions",
    "WorkerGroup": "nsj_queue_lib.worker_group",
    "run_workers": "nsj_queue_lib.worker_group",
    "Workflow": "nsj_queue_lib.workflow.builder",
}


DISTRIBUTION = "nsj-queue-lib"
UNKNOWN_VERSION = "0+unknown"


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return UNKNOWN_VERSION


def __getattr__(name: str) -> Any:
    if name == "__version__":
        version = _version()
        globals()["__version__"] = version
        return version
    module = _LOCATIONS.get(name)
    if module is None:
        raise AttributeError(f"module 'nsj_queue_lib' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | {"__version__"})
