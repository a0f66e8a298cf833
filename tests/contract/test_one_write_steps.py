"""Durable steps and waits inside held commit groups (QUEUE_ONE_WRITE, PostgreSQL).

A held group's tasks are 'pendente' rows locked by its transaction. A step's commit in
the middle of the group must not free them: before its fence every held task of the
group is written 'processando' (db/postgres/held_session.py), and the group goes on as
a two-write group would. The same scenarios as test_durable_steps.py's group tests.
"""

from __future__ import annotations

import pytest

from tests.contract.test_durable_steps import kill_9_after_a_step_inside_a_group, steps_worker

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.parametrize("backend", ["postgres"], indirect=True),
]


@pytest.fixture
def held(monkeypatch):
    """test_durable_steps.py's and test_durable_waits.py's modules, their in-process workers
    holding their groups' tasks."""
    from tests.contract import test_durable_steps as steps
    from tests.contract import test_durable_waits as waits

    def held_worker(backend, slots="threads", **changes):
        return steps_worker(backend, slots, queue_one_write=True, **changes)

    for module in (steps, waits):
        monkeypatch.setattr(module, "steps_worker", held_worker)
    return steps, waits


def test_a_step_in_a_held_group_commits_the_groups_finished_tasks(backend, held):
    held[0].test_a_step_inside_a_commit_group_commits_the_groups_finished_tasks(backend)


def test_a_retry_in_a_held_group_skips_the_finished_step(backend, held):
    held[0].test_a_retry_skips_the_finished_step_whose_writes_committed_once(backend, 20, "threads")


def test_kill_9_after_a_step_in_a_held_group_keeps_what_committed_with_it(backend):
    """The step's commit wrote the group's held tasks 'processando' with it: q0..q2 are
    'sucesso', the running task and r0, r1 'processando'; after kill -9 they are rescued
    as a two-write group's would be, and nothing committed runs again."""
    kill_9_after_a_step_inside_a_group(backend, QUEUE_ONE_WRITE="true")


def test_a_sleeping_task_in_a_held_group_frees_its_executor_and_resumes(backend, held):
    held[1].test_a_sleeping_task_frees_its_executor_and_resumes(backend, 20, "threads")


def test_a_waiting_task_in_a_held_group_is_woken_by_send_event(backend, held):
    held[1].test_wait_event_is_woken_by_send_event_from_another_transaction(backend, 20, "threads")
