"""``nsjq workflow ID`` on PostgreSQL and MariaDB: the workflow's status, its tasks with
their parents, ``--json``, ``--cancel``, and an unknown id."""

from __future__ import annotations

from nsj_queue_lib import Workflow
from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.queue_client import QueueClient
from tests.integration import test_cli
from tests.integration.test_cli import _driver, run, run_json

# nsjq's tests' fixtures: a queue on PostgreSQL and on MariaDB, a clean environment.
queue = test_cli.queue
isolated_environment = test_cli.isolated_environment


def enqueue_diamond(queue) -> dict[str, int]:
    wf = Workflow("nightly <load>")
    a = wf.add(processo="extract", payload={}, chave_externa="A")
    b = wf.add(processo="transform", payload={}, chave_externa="B", after=[a])
    c = wf.add(processo="transform", payload={}, chave_externa="C", after=[a])
    d = wf.add(processo="load", payload={}, chave_externa="D", after=[b, c])
    conn = _driver(queue).connect(autocommit=False)
    try:
        wf.enqueue(QueueClient(conn, queue.table))
        conn.commit()
    finally:
        close_quietly(conn)
    return {"A": a.id, "B": b.id, "C": c.id, "D": d.id}


def test_workflow_shows_status_tasks_and_parents(queue, capsys):
    ids = enqueue_diamond(queue)
    code, out, err = run(capsys, *queue.args("workflow", str(ids["A"])))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"workflow {ids['A']} (nightly <load>, created ")
    assert lines[0].endswith("running; 4 task(s): 3 aguardando, 1 pendente")
    assert lines[1].split() == [
        "TASK",
        "PROCESSO",
        "CHAVE_EXTERNA",
        "STATUS",
        "TENTATIVA",
        "AFTER",
        "MENSAGEM",
    ]
    rows = [line.split() for line in lines[2:]]
    assert [r[:4] for r in rows] == [
        [str(ids["A"]), "extract", "A", "pendente"],
        [str(ids["B"]), "transform", "B", "aguardando"],
        [str(ids["C"]), "transform", "C", "aguardando"],
        [str(ids["D"]), "load", "D", "aguardando"],
    ]
    assert [r[5] for r in rows] == ["-", str(ids["A"]), str(ids["A"]), f"{ids['B']},{ids['C']}"]

    document = run_json(capsys, *queue.args("workflow", str(ids["A"])))
    assert document["status"] == "running" and document["name"] == "nightly <load>"
    assert [t["parents"] for t in document["tasks"]][3] == sorted([ids["B"], ids["C"]])


def test_workflow_cancel_and_unknown_ids(queue, capsys):
    ids = enqueue_diamond(queue)
    document = run_json(capsys, *queue.args("workflow", str(ids["A"]), "--cancel"))
    assert document["status"] == "cancelled"
    assert document["counts"] == {"cancelada": 4}
    assert document["cancelled"] == {str(i): "cancelada" for i in ids.values()}
    code, out, err = run(capsys, *queue.args("workflow", "999999999"))
    assert code == 1 and err.strip() == f"nsjq: workflow 999999999 not found in {queue.table}"
    code, out, err = run(capsys, *queue.args("workflow", "999999999", "--cancel"))
    assert code == 1 and "workflow 999999999 not found" in err
