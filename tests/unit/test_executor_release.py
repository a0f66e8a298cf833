"""After the grace period, ``release_running`` gives up the commit groups of the attempts it
releases, and only those: a task whose handler already returned (FINISHING) is its own
thread's to settle, group and all, and settling its group from here too raced with it."""

from __future__ import annotations

import types
from typing import Any

from nsj_queue_lib.model import TaskRecord
from nsj_queue_lib.runtime.release import release_running
from nsj_queue_lib.runtime.running import ABANDONED, FINISHING, RunningTasks


class Admin:
    def close(self) -> None: ...


class Groups:
    """The group drain, as far as the release calls it."""

    def __init__(self) -> None:
        self.settled: list[int] = []  # tasks whose groups were given up

    def given_up(self, item: Any) -> None:
        self.settled.append(item.task.id)


def task(task_id: int) -> TaskRecord:
    return TaskRecord.from_row(dict(id=task_id, tentativa=1, dead=False, payload="{}"))


def test_release_running_gives_up_the_groups_of_the_released_attempts_only():
    terminated = []
    registry = RunningTasks()
    running, finishing = registry.start("conn 1", task(1)), registry.start("conn 2", task(2))
    registry.finishing(finishing)  # its handler returned: its thread settles its group
    groups = Groups()
    released = []

    def fail_elsewhere(conn: Any, task: TaskRecord, *args: Any, **kwargs: Any) -> None:
        released.append(task.id)  # None: its cancel was requested, it ended 'cancelada'

    failures = types.SimpleNamespace(fail_elsewhere=fail_elsewhere, observer=None, queue_name="q")

    release_running(
        registry,
        failures,  # type: ignore[arg-type]
        Admin,
        lambda admin, conn: terminated.append(conn),
        groups.given_up,
    )

    assert terminated == ["conn 1", "conn 2"]  # both sessions end
    assert running.state == ABANDONED and finishing.state == FINISHING
    assert groups.settled == [1]
    assert released == [1]  # the FINISHING one is its thread's to settle
