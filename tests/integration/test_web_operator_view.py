"""What an operator reads in the API and the console, over real PostgreSQL and MariaDB:
each task's state in words (a dead letter is one, linked to its task), relative times
with the exact one on hover, a failed attempt's whole error, and the overview per
processo with the live workers. The tasks are put in their statuses by the store as a
worker does (``test_cli.populate``)."""

from __future__ import annotations

import json
import re

from nsj_queue_lib.db.dialect import workers_table_name
from nsj_queue_lib.db.driver import close_quietly
from tests.integration import test_web_api
from tests.integration.test_cli import _driver, populate

queue = test_web_api.queue
web = test_web_api.web
# An instant with microseconds, as the API writes them and the console must not.
MICROSECONDS = re.compile(r"\d\d:\d\d:\d\d\.\d{6}")


def test_the_list_says_each_tasks_state_and_links_a_dead_letter_to_its_task(web, queue):
    tasks = populate(queue)
    listed = web.get("/api/v1/tasks", params={"limit": 500}).json()["tasks"]
    states = {t["id"]: t["state"] for t in listed}
    assert states == {
        tasks["ok"]: "completed",
        tasks["running"]: "running",
        tasks["broken_2"]: "exhausted",  # the task's latest attempt: one row per task
        tasks["dead"]: "dead_letter",
        tasks["ready"]: "waiting",
        tasks["later"]: "scheduled",
    }

    page = web.get(f"/queues/{queue.table}/tasks").text
    row = _row(page, tasks["dead"])
    assert 'class="state bad"' in row and ">dead letter<" in row
    assert f'class="live-link" href="/queues/{queue.table}/tasks/{tasks["broken"]}"' in row
    assert ">exhausted<" in _row(page, tasks["broken"])
    later = _row(page, tasks["later"])
    assert ">scheduled<" in later and re.search(r">in (59 min|1 h)</time>", later), later
    assert re.search(r'<time class="rel" datetime="[0-9T:-]+Z" title="[0-9 :-]+ UTC">', page)
    assert not MICROSECONDS.search(page)


def test_a_task_page_shows_the_whole_error_and_its_dead_letter(web, queue):
    tasks = populate(queue)
    broken = web.get(f"/api/v1/tasks/{tasks['broken']}").json()
    assert (broken["state"], broken["dead_letter"]) == ("exhausted", tasks["dead"])
    assert [a["state"] for a in broken["attempts"]] == ["retried", "exhausted", "dead_letter"]
    dead = web.get(f"/api/v1/tasks/{tasks['dead']}").json()
    assert (dead["state"], dead["dead_letter_of"]) == ("dead_letter", tasks["broken"])

    page = web.get(f"/queues/{queue.table}/tasks/{tasks['broken']}").text
    error = page[page.index('id="last-error"') :]
    assert "second error" in error and "attempt 2" in error
    assert f"task={tasks['broken_2']}: attempt 2 of" in error  # where its traceback is logged
    assert f'id="dead-letter" href="/queues/{queue.table}/tasks/{tasks["dead"]}"' in page
    assert 'id="retry"' in page and not MICROSECONDS.search(page)
    dead_page = web.get(f"/queues/{queue.table}/tasks/{tasks['dead']}").text
    assert f'id="live-task" href="/queues/{queue.table}/tasks/{tasks["broken"]}"' in dead_page


def test_the_overview_has_a_row_per_processo_and_the_live_workers(web, queue):
    populate(queue)
    driver = _driver(queue)
    conn = driver.connect(autocommit=True)
    try:
        driver.store().worker_seen(conn, "cli-test-worker", json.dumps(["p1", "p2"]))
    finally:
        close_quietly(conn)
    stats = web.get(f"/api/v1/queues/{queue.table}/stats").json()
    rows = {r["processo"]: r for r in stats["processos"]}
    assert (rows["p1"]["waiting"], rows["p1"]["done_last_hour"]) == (1, 1)  # the dead letter
    assert (rows["p1"]["failed_last_hour"], rows["p1"]["workers"]) == (2, 1)
    assert (rows["p2"]["waiting"], rows["p2"]["running"]) == (2, 1)
    [worker] = stats["workers"]
    assert (worker["worker"], worker["processos"], worker["running"]) == (
        "cli-test-worker",
        ["p1", "p2"],
        1,
    )

    page = web.get("/").text
    assert page.count('<a href="/queues/' + queue.table + "/tasks?processo=") == 2
    assert '<td class="worker">cli-test-worker</td>' in page and not MICROSECONDS.search(page)


def _row(page: str, task_id: int) -> str:
    """The list's row of the task ``task_id``."""
    start = page.index(f'/tasks/{task_id}">{task_id}</a></td>')
    return page[page.rindex("<tr", 0, start) : page.index("</tr>", start)]


def test_without_a_workers_table_the_overview_says_the_workers_are_unknown(web, queue):
    populate(queue)
    conn = _driver(queue).connect(autocommit=True)
    try:
        conn.cursor().execute(f"DROP TABLE {workers_table_name(queue.table)}")
    finally:
        close_quietly(conn)
    stats = web.get(f"/api/v1/queues/{queue.table}/stats").json()
    assert stats["workers"] is None
    assert {r["workers"] for r in stats["processos"]} == {None}
    # The task done just now counts in its processo's rate (per minute, over 5 minutes).
    assert {r["processo"]: r["done_per_minute"] for r in stats["processos"]}["p1"] == 0.2
    assert "no workers table" in web.get("/").text


def test_the_overview_shows_an_open_webhook_subscriber_breaker(web, queue):
    conn = _driver(queue).connect(autocommit=True)
    try:
        conn.cursor().execute(
            f"INSERT INTO {queue.table}_subscriber (id, processo, url, breaker_open, breaker_trial)"
            " VALUES ('hook', 'p1', 'http://127.0.0.1:9/', TRUE, TRUE)"
        )
    finally:
        close_quietly(conn)
    stats = web.get(f"/api/v1/queues/{queue.table}/stats").json()
    assert stats["subscriber_circuit_breakers"] == [
        {"subscriber": "hook", "failures": 0, "state": "half_open", "until": None}
    ]
    page = web.get("/").text
    assert "CIRCUIT BREAKER of webhook subscriber hook: half-open" in page
