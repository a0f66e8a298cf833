"""The endpoints of worker processes (QUEUE_METRICS_PORT), on PostgreSQL and MariaDB (and, for
the drain, PostgreSQL through the socket server, whose lock elects the depth sampler).

Two workers drain a queue of tasks that succeed, fail once, or run out of
attempts; ``/metrics`` is scraped while they drain, and afterwards the
finished counts of both workers add up to what the table says. One worker
at a time publishes the queue's depth. ``/healthz`` answers fast, ``/readyz``
is 200 once the worker is connected, and SIGTERM still ends each worker at
once with exit code 0 (the HTTP server holds nothing up).
"""

from __future__ import annotations

import json
import signal
import statistics
import time

import pytest

from tests.helpers.endpoints import free_port, get, get_json, samples, total
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(90)

DIRECT = [
    pytest.param("postgres", id="postgres"),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]
FINISHED = "nsjq_tasks_finished_total"
OK, FAIL_ONCE, DEAD = 40, 10, 5  # tasks of each kind


def enqueue_mix(backend) -> None:
    tasks = [dict(payload=json.dumps({"sleep": 0.05})) for _ in range(OK)]
    tasks += [
        dict(payload=json.dumps({"fail_on": [1]}), processo="twice") for _ in range(FAIL_ONCE)
    ]
    tasks += [dict(payload=json.dumps({"fail_on": [1, 2]}), processo="never") for _ in range(DEAD)]
    backend.enqueue(tasks)


def table_outcomes(backend) -> dict[str, int]:
    """Attempts per outcome as the table shows them."""
    rows = backend.query(
        f"SELECT status, estouro_tentativas AS dead, count(*) AS n FROM {backend.table} "
        "GROUP BY status, estouro_tentativas"
    )
    out = {"sucesso": 0, "falha": 0, "dead": 0}
    for row in rows:
        if row["dead"]:
            out["dead"] += int(row["n"])
        elif row["status"] in ("sucesso", "falha"):
            out[row["status"]] += int(row["n"])
    return out


@pytest.mark.parametrize(
    "backend",
    [*DIRECT, pytest.param("postgres-via-server", id="postgres-via-server")],
    indirect=True,
)
def test_two_workers_metrics_match_the_table_after_a_drain(backend):
    ports = [free_port(), free_port()]
    procs = [
        backend.start_process(
            f"metrics{i}",
            QUEUE_METRICS_PORT=port,
            QUEUE_MAX_RETRY=2,
            QUEUE_CONCURRENCY=2,
            QUEUE_METRICS_DEPTH_INTERVAL=0.2,
        )
        for i, port in enumerate(ports)
    ]
    for port in ports:
        wait_for(lambda p=port: get(p, "/readyz")[0] == 200, 15, f"/readyz on {port}")
    enqueue_mix(backend)

    # While the queue drains, every scrape answers; one worker publishes the depth.
    seen_depth, scrapes = set(), 0
    while backend.value(
        f"SELECT count(*) FROM {backend.table} WHERE status IN ('pendente', 'agendada', "
        "'processando')"
    ):
        for i, port in enumerate(ports):
            if total(samples(port), "nsjq_queue_depth_sampled_timestamp_seconds"):
                seen_depth.add(i)
            scrapes += 1
        time.sleep(0.05)
    assert scrapes >= 2
    # Dead letters succeed (the default execute_dead).
    expected = {"sucesso": OK + FAIL_ONCE + DEAD, "falha": FAIL_ONCE + DEAD, "dead": DEAD}
    assert table_outcomes(backend) == expected

    def counted(scraped: list) -> dict:
        return {
            outcome: sum(total(found, FINISHED, outcome=outcome) for found in scraped)
            for outcome in expected
        }

    # A worker counts a task once its commit returned: the table can show the last tasks
    # settled a moment before the metrics do.
    scraped: list = []

    def all_counted() -> bool:
        scraped[:] = [samples(port) for port in ports]
        return counted(scraped) == expected

    wait_for(all_counted, 10, "the metrics to count every settled task")
    assert (
        sum(total(found, FINISHED, processo="never", outcome="dead") for found in scraped) == DEAD
    )
    assert len(seen_depth) == 1, seen_depth
    for found in scraped:
        assert total(found, "nsjq_running_tasks") == 0
        assert total(found, "nsjq_executors") == 2
    handled = sum(total(found, "nsjq_handler_duration_seconds_count") for found in scraped)
    assert handled == sum(expected.values())

    # /healthz answers without the database, fast; SIGTERM ends the workers at once.
    times = [get(ports[0], "/healthz")[2] for _ in range(10)]
    # A bound a database round trip under load would not break, nor a wait on one: 20 ms
    # failed once on a busy run (median 20 ms; speed targets live in benchmarks).
    assert statistics.median(times) < 0.1, times
    assert get_json(ports[0], "/healthz") == (200, {"status": "ok"})
    started = time.monotonic()
    for proc in procs:
        proc.send(signal.SIGTERM)
    assert [proc.wait(15) for proc in procs] == [0, 0]
    assert time.monotonic() - started < 5
    assert get(ports[0], "/healthz")[0] is None  # the server closed with the worker


@pytest.mark.parametrize("backend", DIRECT, indirect=True)
def test_a_rescued_attempt_is_counted_by_the_worker_that_rescued_it(backend):
    victim = backend.start_process("victim")
    [task_id] = backend.enqueue(
        [dict(payload=json.dumps({"sleep": 60, "sleep_on": [1], "started": True}), processo="p")]
    )
    wait_for(lambda: backend.started_ids() == [task_id], 15, "the victim to start the task")
    victim.kill9()
    port = free_port()
    rescuer = backend.run(
        backend.contract_worker(queue_retry_thread_interval=0.2, queue_metrics_port=port)
    )
    backend.wait_statuses({"falha_processando": 1, "sucesso": 1}, 15, "the rescue and the retry")
    # A task is counted just after its commit: the table can be ahead for a moment.
    wait_for(lambda: total(samples(port), FINISHED) >= 2, 10, "the metrics to count both")
    found = samples(port)
    assert total(found, FINISHED, processo="p", outcome="rescued") == 1
    assert total(found, FINISHED, processo="p", outcome="sucesso") == 1
    assert total(found, FINISHED) == 2
    assert rescuer.stop() == 0
