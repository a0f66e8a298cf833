"""Durable steps and waits without a database: argument checks, and where they refuse to run
(nsj_queue_lib/workflow/steps.py, waits.py; the database side is in
tests/contract/test_durable_steps.py and test_durable_waits.py)."""

from __future__ import annotations

import math

import pytest

from nsj_queue_lib import Task
from nsj_queue_lib.context import TaskContext
from nsj_queue_lib.runtime.pipeline import run_pipeline
from nsj_queue_lib.workflow import waits
from nsj_queue_lib.workflow.steps import NAME_LIMIT, check_name


@pytest.mark.parametrize("name", ["", None, 3, b"x", "x" * (NAME_LIMIT + 1)])
def test_a_step_name_is_a_short_non_empty_str(name):
    with pytest.raises((TypeError, ValueError)):
        check_name(name)
    assert check_name("x" * NAME_LIMIT) == "x" * NAME_LIMIT


@pytest.mark.parametrize("value", [-1, math.inf, math.nan, "1", True, None])
def test_wait_durations_are_finite_non_negative_numbers(value):
    with pytest.raises((TypeError, ValueError)):
        waits._seconds("seconds", value)
    assert waits._seconds("seconds", 0) == 0.0 and waits._seconds("seconds", 2.5) == 2.5


def test_steps_and_waits_outside_a_worker_run_refuse_clearly():
    """A context with no connection nor commits (InMemoryQueue, async handlers): RuntimeError
    before anything runs."""
    context = TaskContext(1)
    ran = []
    with pytest.raises(RuntimeError, match="synchronous handler run by a worker"):
        context.step("a", ran.append, 1)
    with pytest.raises(RuntimeError):
        context.sleep(1)
    with pytest.raises(RuntimeError):
        context.wait_event("go", 1)
    assert ran == []


def test_durable_steps_is_a_bool_option_and_async_generators_cannot_have_it():
    assert Task("p", durable_steps=True).options.durable_steps is True
    assert Task("p").options.durable_steps is False
    with pytest.raises(TypeError):
        Task("p", durable_steps="yes")  # type: ignore[arg-type]

    async def steps():
        yield 1

    with pytest.raises(TypeError, match="synchronous generator"):
        run_pipeline(steps(), TaskContext(1), None, durable=True)


def test_singlestore_has_no_checkpoints_and_says_so():
    from nsj_queue_lib.db.step_store import StepStore
    from nsj_queue_lib.exceptions import WorkflowUnsupported

    with pytest.raises(WorkflowUnsupported, match="durable steps and waits .* need PostgreSQL"):
        StepStore("singlestore", "public.fila")
    assert StepStore("mysql", "db.fila").sql["save_step"].startswith("INSERT INTO db.fila_steps")


def test_steps_and_waits_do_not_nest_nor_run_after_the_attempt_ended():
    context = TaskContext(1)
    context.in_step = True
    with pytest.raises(RuntimeError, match="inside a step's fn"):
        context.sleep(1)
    context.in_step = False
    context.suspension = BaseException("ended")
    with pytest.raises(RuntimeError, match="ended at a durable wait"):
        context.step("a", print)


def test_step_names_of_the_librarys_own_checkpoints_are_refused():
    from nsj_queue_lib.workflow.steps import check_step_name
    from nsj_queue_lib.workflow.waits import EVENT_NAME_LIMIT

    for name in ("sleep:1", "event:go:1", "yield:2"):
        with pytest.raises(ValueError, match="may not start with"):
            check_step_name(name)
    assert check_step_name("sleepy") == "sleepy"
    with pytest.raises(ValueError):
        waits.wait_event(TaskContext(1), "x" * (EVENT_NAME_LIMIT + 1), 1)
