"""``nsjq process ID`` on PostgreSQL and MariaDB: the process's status, state, timer, tasks
and events, ``--json``, and an unknown id. The process is made by hand (no worker runs):
start_process's task, then its row as a handler would have left it."""

from __future__ import annotations

from nsj_queue_lib.db.driver import close_quietly
from nsj_queue_lib.queue_client import QueueClient
from tests.integration import test_cli
from tests.integration.test_cli import _driver, run, run_json

# nsjq's tests' fixtures: a queue on PostgreSQL and on MariaDB, a clean environment.
queue = test_cli.queue
isolated_environment = test_cli.isolated_environment


def start(queue) -> int:
    conn = _driver(queue).connect(autocommit=False)
    try:
        task_id = QueueClient(conn, queue.table).start_process("pay <1>", "payment_init", {"a": 1})
        with conn.cursor() as cur:
            cur.execute(
                f"UPDATE {queue.table}_processes SET state = %s, detail = %s WHERE process_id = %s",
                ('{"amount": 100}', "waiting for the capture", "pay <1>"),
            )
            cur.execute(
                f"INSERT INTO {queue.table}_process_events (process_id, task_id, event_type, "
                "payload) VALUES (%s, %s, %s, %s)",
                ("pay <1>", task_id, "created", '{"amount": 100}'),
            )
        conn.commit()
        return task_id
    finally:
        close_quietly(conn)


def test_process_shows_status_state_tasks_and_events(queue, capsys):
    task_id = start(queue)
    code, out, err = run(capsys, *queue.args("process", "pay <1>"))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("process pay <1> (payment_init, created ")
    assert lines[0].endswith("): running")
    assert lines[1] == "detail: waiting for the capture"
    assert lines[2] == 'state: {"amount": 100}'
    assert lines[3].split() == [
        "TASK",
        "KIND",
        "PROCESSO",
        "STATUS",
        "STARTED_AT",
        "FINISHED_AT",
        "RESPONSE",
    ]
    assert lines[4].split()[:4] == [str(task_id), "start", "payment_init", "pendente"]
    assert lines[5].split() == ["EVENT", "TYPE", "TASK", "CREATED_AT", "PAYLOAD"]
    assert lines[6].split()[1:3] == ["created", str(task_id)]

    document = run_json(capsys, *queue.args("process", "pay <1>"))
    assert document["state"] == {"amount": 100} and document["corrupted"] is False
    assert [t["id"] for t in document["tasks"]] == [task_id]
    assert [e["payload"] for e in document["events"]] == [{"amount": 100}]


def test_an_unknown_process_is_nothing_to_show(queue, capsys):
    code, out, err = run(capsys, *queue.args("process", "nobody"))
    assert code == 1 and out == ""
    assert "process 'nobody' not found" in err
