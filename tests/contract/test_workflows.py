"""Workflows (CONTRACT.md section 8, docs/how-to/workflows.md) on PostgreSQL, MariaDB and
the socket server: ``Workflow(name).add(...)`` handles in ``after=``, ``enqueue`` in the
caller's transaction, ``get_workflow`` (status derived from the tasks, tasks with their
parents) and ``cancel_workflow``. SingleStore refuses clearly."""

from __future__ import annotations

import pytest

from nsj_queue_lib import PermanentError, Workflow
from nsj_queue_lib.db.postgres.client_store import COPY_THRESHOLD
from nsj_queue_lib.exceptions import NotFoundError, WorkflowUnsupported
from tests.contract.test_contract import write_exec
from tests.contract.test_dependencies import DEPENDENCY_BACKENDS, exec_order

pytestmark = pytest.mark.timeout(120)


def diamond(name: str = "diamond") -> tuple[Workflow, dict[str, object]]:
    wf = Workflow(name)
    a = wf.add(processo="processar", payload={"k": "A"}, chave_externa="A")
    b = wf.add(processo="processar", payload={"k": "B"}, chave_externa="B", after=[a])
    c = wf.add(processo="processar", payload={"k": "C"}, chave_externa="C", after=[a])
    d = wf.add(processo="processar", payload={"k": "D"}, chave_externa="D", after=[b, c])
    return wf, {"A": a, "B": b, "C": c, "D": d}


def get_workflow(backend, workflow_id):
    with backend.transaction() as conn:
        return backend.client(conn).get_workflow(workflow_id)


@DEPENDENCY_BACKENDS
@pytest.mark.parametrize("batch", [None, 20], ids=["default-commit", "group-commit"])
def test_a_diamond_workflow_runs_in_order_and_get_workflow_shows_it(backend, batch):
    wf, handles = diamond()
    with backend.transaction() as conn:
        workflow_id = wf.enqueue(backend.client(conn))
        # Nothing is visible before the caller's commit.
        assert get_workflow(backend, workflow_id) is None
    ids = {k: h.id for k, h in handles.items()}
    assert workflow_id == ids["A"] == wf.id
    view = get_workflow(backend, workflow_id)
    assert (view["id"], view["name"], view["status"]) == (workflow_id, "diamond", "running")
    assert [t["chave_externa"] for t in view["tasks"]] == ["A", "B", "C", "D"]
    assert [t["status"] for t in view["tasks"]] == [
        "pendente",
        "aguardando",
        "aguardando",
        "aguardando",
    ]
    assert [sorted(t["parents"]) for t in view["tasks"]] == [
        [],
        [ids["A"]],
        [ids["A"]],
        sorted([ids["B"], ids["C"]]),
    ]
    assert view["counts"] == {"pendente": 1, "aguardando": 3}

    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)
        return f"done {tarefa['chave_externa']}"

    changes = {"queue_concurrency": 3, **({"queue_batch_size": batch} if batch else {})}
    worker = backend.run(backend.function_worker(execute, **changes))
    backend.wait_statuses({"sucesso": 4}, 30, "the diamond to finish")
    assert worker.stop() == 0
    order = exec_order(backend)
    assert order[0] == "A" and order[-1] == "D" and sorted(order[1:3]) == ["B", "C"]
    view = get_workflow(backend, workflow_id)
    assert view["status"] == "succeeded"
    assert view["counts"] == {"sucesso": 4}
    assert [t["mensagem"] for t in view["tasks"]] == ["done A", "done B", "done C", "done D"]
    # Any task of the workflow leads to it (the console's link).
    from nsj_queue_lib.workflow.view import workflow_of_task

    with backend.transaction() as conn:
        assert workflow_of_task(backend.client(conn), ids["D"]) == workflow_id


@DEPENDENCY_BACKENDS
def test_a_failed_task_fails_the_workflow_and_cancels_what_waits_for_it(backend):
    wf, handles = diamond("failing")
    wf.add(
        processo="processar",
        payload={},
        chave_externa="E",
        after=[handles["B"]],
        on_parent_failure="run",
    )

    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)
        if tarefa["chave_externa"] != "B":
            return "ok"
        raise PermanentError("B can never succeed")  # no retry: its dead letter follows

    with backend.transaction() as conn:
        workflow_id = wf.enqueue(backend.client(conn))
    worker = backend.run(backend.function_worker(execute))
    # A, C, E and B's dead letter (which is no task of the workflow) end 'sucesso'.
    backend.wait_statuses({"sucesso": 4, "falha": 1, "cancelada": 1}, 30, "the workflow to end")
    assert worker.stop() == 0
    view = get_workflow(backend, workflow_id)
    assert view["status"] == "failed"
    by_key = {t["chave_externa"]: t for t in view["tasks"]}
    assert by_key["D"]["status"] == "cancelada"
    assert f"parent task {handles['B'].id} " in by_key["D"]["mensagem"]
    assert by_key["E"]["status"] == "sucesso"


@DEPENDENCY_BACKENDS
def test_cancel_workflow_cancels_waiting_tasks_and_asks_running_ones_to_stop(backend):
    wf, handles = diamond("to-cancel")
    with backend.transaction() as conn:
        workflow_id = wf.enqueue(backend.client(conn))
    with backend.transaction() as conn:
        after = backend.client(conn).cancel_workflow(workflow_id)
    assert after == {h.id: "cancelada" for h in handles.values()}
    view = get_workflow(backend, workflow_id)
    assert view["status"] == "cancelled"
    assert view["counts"] == {"cancelada": 4}
    with backend.transaction() as conn:
        with pytest.raises(NotFoundError):
            backend.client(conn).cancel_workflow(987654321)
        assert backend.client(conn).get_workflow(987654321) is None


@DEPENDENCY_BACKENDS
def test_cancel_workflow_while_a_task_runs(backend):
    """A running root is asked to stop ('processando' returned); its children are cancelled
    once it stops; nothing else runs."""
    started = []

    def execute(payload, tarefa, bd_conn):
        from nsj_queue_lib import current_task

        started.append(tarefa["chave_externa"])
        task = current_task()
        for _ in range(200):
            task.check_cancelled()
            import time

            time.sleep(0.05)
        return "ok"

    wf, handles = diamond("cancel-running")
    with backend.transaction() as conn:
        workflow_id = wf.enqueue(backend.client(conn))
    worker = backend.run(backend.function_worker(execute))
    backend.wait_statuses({"processando": 1, "aguardando": 3}, 20, "A to start")
    with backend.transaction() as conn:
        after = backend.client(conn).cancel_workflow(workflow_id)
    assert after[handles["A"].id] == "processando"
    assert {after[handles[k].id] for k in "BCD"} == {"aguardando"} or {
        after[handles[k].id] for k in "BCD"
    } == {"cancelada"}
    backend.wait_statuses({"cancelada": 4}, 20, "the workflow to be cancelled")
    assert worker.stop() == 0
    assert started == ["A"]
    assert get_workflow(backend, workflow_id)["status"] == "cancelled"


@DEPENDENCY_BACKENDS
def test_bad_workflows_are_refused_before_anything_is_written(backend):
    other = Workflow("other")
    foreign = other.add(processo="p", payload={})
    wf = Workflow("bad")
    with pytest.raises(TypeError, match="not a task of workflow"):
        wf.add(processo="p", payload={}, after=[foreign])
    with pytest.raises(TypeError, match="unknown option"):
        wf.add(processo="p", payload={}, dedupe_key="k")
    with pytest.raises(ValueError, match="processo"):
        wf.add(processo="", payload={})
    with pytest.raises(ValueError, match="on_parent_failure"):
        wf.add(processo="p", payload={}, on_parent_failure="maybe")
    with pytest.raises(ValueError):
        Workflow("")
    with backend.transaction() as conn:
        with pytest.raises(ValueError, match="no tasks"):
            wf.enqueue(backend.client(conn))
    assert backend.rows() == []
    with backend.transaction() as conn:
        other.enqueue(backend.client(conn))
        with pytest.raises(RuntimeError, match="enqueued"):
            other.enqueue(backend.client(conn))
        with pytest.raises(RuntimeError, match="enqueued"):
            other.add(processo="p", payload={})


@pytest.mark.parametrize(
    "backend",
    [pytest.param("singlestore-via-server", marks=pytest.mark.mysql)],
    indirect=True,
)
def test_singlestore_refuses_workflows_clearly(backend):
    wf, _ = diamond()
    with backend.transaction() as conn:
        # The client cannot tell SingleStore from MySQL: the missing tables tell.
        with pytest.raises(WorkflowUnsupported, match="SingleStore"):
            wf.enqueue(backend.client(conn))
        with pytest.raises(WorkflowUnsupported):
            backend.client(conn).get_workflow(1)


@DEPENDENCY_BACKENDS
def test_a_wide_fan_out_and_fan_in_workflow(backend):
    """1 -> N -> 1 with N over the bulk insert's COPY threshold (PostgreSQL): enqueued in one
    call, the fan-in runs once, after every middle task; the view lists N + 2 tasks."""
    width = COPY_THRESHOLD + 10
    wf = Workflow("wide")
    root = wf.add(processo="processar", payload={}, chave_externa="root")
    middle = [
        wf.add(processo="processar", payload={}, chave_externa=f"m{i}", after=[root])
        for i in range(width)
    ]
    wf.add(processo="processar", payload={}, chave_externa="last", after=middle)
    with backend.transaction() as conn:
        workflow_id = wf.enqueue(backend.client(conn))
    assert backend.statuses() == {"pendente": 1, "aguardando": width + 1}

    def execute(payload, tarefa, bd_conn):
        write_exec(backend, bd_conn, tarefa)
        return "ok"

    worker = backend.run(backend.function_worker(execute, queue_concurrency=4))
    backend.wait_statuses({"sucesso": width + 2}, 60, "the fan-in to run")
    assert worker.stop() == 0
    order = exec_order(backend)
    assert order[0] == "root" and order[-1] == "last" and order.count("last") == 1
    view = get_workflow(backend, workflow_id)
    assert view["status"] == "succeeded" and len(view["tasks"]) == width + 2
    assert len(view["tasks"][-1]["parents"]) == width
