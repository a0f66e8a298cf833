"""``@Task``: options checked at decoration, registries per class, routing by processo (pure)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsj_queue_lib import PermanentError, Task, WorkerBase, WorkerPubSubBase
from nsj_queue_lib.task import TaskOptions
from nsj_queue_lib.worker_base import EXIT_CONFIG_ERROR

REPOSITORY = Path(__file__).resolve().parents[2]

CONN = object()


def tarefa(processo: str, **columns) -> dict:
    row = {"id": 5, "processo": processo, "payload": "p", "dead": False, "pub_sub": False}
    row.update(columns)
    return row


class Billing(WorkerBase):
    @Task("nota_emitida", max_retry=3)
    def on_nota(self, payload, tarefa, bd_conn):
        return f"nota {payload} {tarefa['id']} {bd_conn is CONN}"

    @Task("boleto_pago")
    @Task("pix_pago", retry_backoff="exponential", retry_base_s=1, retry_max_s=60)
    def on_payment(self, payload, tarefa, bd_conn):
        return f"payment {tarefa['processo']}"

    def execute(self, payload, tarefa, bd_conn):
        return f"fallback {tarefa['processo']}"

    def execute_dead(self, payload, tarefa, bd_conn):
        return f"dead {tarefa['processo']}"


def test_each_processo_goes_to_its_method_and_the_rest_to_execute():
    worker = Billing(None)
    assert worker.handle_task(tarefa("nota_emitida"), CONN) == "nota p 5 True"
    assert worker.handle_task(tarefa("pix_pago"), CONN) == "payment pix_pago"
    assert worker.handle_task(tarefa("boleto_pago"), CONN) == "payment boleto_pago"
    assert worker.handle_task(tarefa("outro"), CONN) == "fallback outro"


def test_dead_letters_go_to_execute_dead_whatever_their_processo():
    assert Billing(None).handle_task(tarefa("nota_emitida", dead=True), CONN) == "dead nota_emitida"


def test_a_processo_with_neither_a_method_nor_execute_fails_permanently_naming_the_known_ones():
    class OnlyTasks(WorkerBase):
        @Task("b")
        def b(self, payload, tarefa, bd_conn):
            return "b"

        @Task("a")
        def a(self, payload, tarefa, bd_conn):
            return "a"

    with pytest.raises(PermanentError) as info:
        OnlyTasks(None).handle_task(tarefa("c"), CONN)
    assert str(info.value) == (
        "no handler for processo 'c': OnlyTasks has no @Task method for it and no execute(); "
        "processos it handles: 'a', 'b'"
    )


def test_task_options_are_the_declared_ones_or_all_defaults():
    assert Billing.task_options("nota_emitida") == TaskOptions("nota_emitida", max_retry=3)
    assert Billing(None).task_options("pix_pago") == TaskOptions(
        "pix_pago", retry_backoff="exponential", retry_base_s=1, retry_max_s=60
    )
    assert Billing.task_options("outro") == TaskOptions("outro")
    assert Billing.task_options("") == TaskOptions("")  # a hand-written row's processo
    assert Billing.task_options("outro").timeout_s is None


def test_registries_are_inherited_overridable_and_never_shared_between_classes():
    class Child(Billing):
        @Task("nota_emitida", max_retry=9)
        def nota_again(self, payload, tarefa, bd_conn):
            return "child nota"

        def on_payment(self, payload, tarefa, bd_conn):  # overridden without a decorator
            return "child payment"

    class Sibling(WorkerBase):
        @Task("sibling_only")
        def s(self, payload, tarefa, bd_conn):
            return "s"

    child = Child(None)
    assert child.handle_task(tarefa("nota_emitida"), CONN) == "child nota"
    assert Child.task_options("nota_emitida").max_retry == 9
    assert child.handle_task(tarefa("pix_pago"), CONN) == "child payment"
    assert Billing(None).handle_task(tarefa("nota_emitida"), CONN) == "nota p 5 True"
    assert Billing.task_options("nota_emitida").max_retry == 3
    assert Billing(None).handle_task(tarefa("sibling_only"), CONN) == "fallback sibling_only"
    assert "sibling_only" not in Child._task_registry.methods


def test_pub_sub_publications_and_deliveries_are_not_routed_by_processo():
    class Mixed(WorkerPubSubBase):
        @Task("evento")
        def evento(self, payload, tarefa, bd_conn):
            return "task method"

    worker = Mixed(None)
    assert worker.handle_task(tarefa("evento"), CONN) == "task method"
    # A delivery of the same processo is routed by its subscriber, as before.
    with pytest.raises(Exception, match="subscriber 's' has no @Subscriber method"):
        worker.handle_task(
            tarefa(
                "evento",
                publication_id=1,
                payload='{"publication": "x", "subscription": {"id": "s"}}',
            ),
            CONN,
        )


# -- bad declarations ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, option",
    [
        (dict(max_retry=0), "max_retry"),
        (dict(max_retry=2.5), "max_retry"),
        (dict(max_retry=True), "max_retry"),
        (dict(retry_backoff="fibonacci"), "retry_backoff"),
        (dict(retry_base_s=0), "retry_base_s"),
        (dict(retry_base_s=-1), "retry_base_s"),
        (dict(retry_base_s=float("nan")), "retry_base_s"),
        (dict(retry_max_s=float("inf")), "retry_max_s"),
        (dict(retry_base_s=10, retry_max_s=5), "retry_max_s"),
        (dict(timeout_s=0), "timeout_s"),
        (dict(timeout_s="30"), "timeout_s"),
    ],
)
def test_a_bad_option_is_a_value_error_naming_the_processo_and_the_option(options, option):
    with pytest.raises(ValueError, match=rf"^@Task\('nota'\): {option} "):
        Task("nota", **options)


@pytest.mark.parametrize("processo", ["", "  ", None, 7, "x" * 251])
def test_a_bad_processo_is_a_value_error(processo):
    with pytest.raises(ValueError, match="processo"):
        Task(processo)


@pytest.mark.parametrize("option", ["retries"])
def test_an_unknown_option_is_a_type_error(option):
    with pytest.raises(TypeError, match=option):
        Task("nota", **{option: 1})


def test_two_methods_of_one_class_for_one_processo_is_an_error_at_class_definition():
    with pytest.raises(ValueError, match=r"processo 'x' has two @Task methods, a and b"):

        class Twice(WorkerBase):
            @Task("x")
            def a(self, payload, tarefa, bd_conn):
                return "a"

            @Task("x")
            def b(self, payload, tarefa, bd_conn):
                return "b"


def test_the_same_task_twice_on_one_method_is_an_error():
    with pytest.raises(ValueError, match="twice"):

        @Task("x")
        @Task("x", max_retry=2)
        def handler(self, payload, tarefa, bd_conn):
            return "h"


def test_async_def_methods_are_accepted_and_routed_as_async():
    class Mixed(WorkerBase):
        @Task("a")
        async def a(self, payload, tarefa, bd_conn):
            return "a"

        @Task("s")
        def s(self, payload, tarefa, bd_conn):
            return "s"

    worker = Mixed()
    assert Mixed.has_async_handlers()
    assert worker.handler_is_async({"processo": "a"})
    assert not worker.handler_is_async({"processo": "s"})
    assert not worker.handler_is_async({"processo": "other"})  # execute: sync
    assert not Billing.has_async_handlers()


def test_async_generator_pipelines_run_on_the_event_loop():
    class Steps(WorkerBase):
        @Task("a")
        async def a(self, payload, tarefa, bd_conn):
            yield "h"

        @Task("s")
        def s(self, payload, tarefa, bd_conn):
            yield "step"

    assert Steps.has_async_handlers()
    assert Steps().handler_is_async({"processo": "a"})
    assert not Steps().handler_is_async({"processo": "s"})  # a sync pipeline runs in a thread


# -- options that only turn out wrong against the settings ---------------------------------

CLASHING_WORKER = """
from nsj_queue_lib import Task, WorkerBase

class Clash(WorkerBase):
    @Task("p", retry_max_s=30)
    def p(self, payload, tarefa, bd_conn):
        return "never runs"

Clash().run()
"""


def run_worker_code(code: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter with a worker's minimal environment (no database)."""
    base = {
        "PATH": os.environ.get("PATH", ""),
        "DB_HOST": "127.0.0.1",
        "DB_BASE": "test",
        "DB_USER": "nobody",
        "QUEUE_NAME": "fila",
        "QUEUE_TABLE": "fila",
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_worker_whose_options_clash_with_the_settings_exits_with_code_2_naming_them():
    # retry_max_s=30 with no retry_base_s: the base is QUEUE_BASE_INTERVAL_RETRY, 1 minute.
    done = run_worker_code(CLASHING_WORKER, QUEUE_BASE_INTERVAL_RETRY="1")
    assert done.returncode == EXIT_CONFIG_ERROR, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "nsj_queue_lib: configuration error: @Task('p') retry_max_s must be >= the retry base "
        "(60 s from QUEUE_BASE_INTERVAL_RETRY), got 30"
    )


def test_a_generator_handler_is_run_to_its_end_by_handle_task():
    class Steps(WorkerBase):
        @Task("x")
        def handler(self, payload, tarefa, bd_conn):
            yield (1, 2)
            yield (2, 2, "second")
            return f"done {payload}"

    assert Steps().handle_task({"id": 1, "processo": "x", "payload": "p"}, None) == "done p"
