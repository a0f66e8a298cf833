"""The metrics of process instances (issue 42) from a real worker process (QUEUE_METRICS_PORT)
on PostgreSQL and MariaDB: ``nsjq_process_task_delay_seconds`` by kind (how late a timer
fired, how long a call waited from its enqueue to its start) and
``nsjq_process_task_duration_seconds`` by processo and kind; no process_id label, and
nothing of them for a task of no process.
"""

from __future__ import annotations

import json

import pytest

from tests.contract.test_async_handlers import BOTH
from tests.contract.test_processes import PROCESS_WORKER, call, chaves, start
from tests.helpers.endpoints import free_port, get, samples, total
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(90)

DELAY = "nsjq_process_task_delay_seconds"
DURATION = "nsjq_process_task_duration_seconds"


@BOTH
def test_a_worker_exports_process_task_delays_and_durations_by_kind(backend):
    # Enqueued before the worker starts: the second call waits behind the first, which
    # sleeps 1 s (a process's tasks run one at a time).
    start(backend, "m-1", seq=0)
    call(backend, "m-1", seq=1, sleep=1)
    call(backend, "m-1", seq=2)
    port = free_port()
    backend.start_process(
        "metrics", script=PROCESS_WORKER, QUEUE_METRICS_PORT=port, QUEUE_MAX_RETRY=1
    )
    wait_for(lambda: get(port, "/readyz")[0] == 200, 15, "/readyz")
    call(backend, "m-1", "arm", **{"in": 0.5, "label": "soon"})
    wait_for(lambda: "m-1-fired:soon" in chaves(backend), 20, "the timer to fire")
    # A dead-lettered call corrupts the process; a repair mends it.
    call(backend, "m-1", "break")
    wait_for(
        lambda: backend.query(f"SELECT corrupted_by FROM {backend.table}_processes")[0][
            "corrupted_by"
        ],
        20,
        "the corruption",
    )
    with backend.transaction() as conn:
        repair = backend.client(conn).repair_process("m-1", "fix", "{}")
    # A task of no process.
    backend.enqueue([dict(processo="plain", payload=json.dumps({}))])
    wait_for(lambda: backend.row(repair)["status"] == "sucesso", 20, "the repair")
    wait_for(
        lambda: any(r["processo"] == "plain" and r["status"] == "sucesso" for r in backend.rows()),
        20,
        "the plain task",
    )

    def counted() -> bool:
        found = samples(port)
        return total(found, DURATION + "_count") >= 7

    wait_for(counted, 10, "the last task's report")
    found = samples(port)
    counts = {
        kind: total(found, DELAY + "_count", kind=kind)
        for kind in ("start", "call", "timer", "repair")
    }
    # call: seq 1, seq 2, the arming call, the break (its one attempt)
    assert counts == {"start": 1, "call": 4, "timer": 1, "repair": 1}
    durations = {
        (labels["processo"], labels["kind"]): value
        for name, labels, value in found
        if name == DURATION + "_count"
    }
    assert durations == {
        ("count", "start"): 1,
        ("count", "call"): 2,
        ("arm", "call"): 1,
        ("fire", "timer"): 1,
        ("break", "call"): 1,
        ("fix", "repair"): 1,
    }
    # The handler of seq 1 slept 1 s; seq 2 waited for it from its enqueue.
    assert total(found, DURATION + "_sum", processo="count", kind="call") >= 1.0
    assert total(found, DELAY + "_sum", kind="call") >= 0.9
    # The timer was due 0.5 s after it was set, and started within a few seconds of that.
    assert total(found, DELAY + "_sum", kind="timer") < 5
    assert total(found, DELAY + "_bucket", kind="timer", le="5.0") == 1
    # No process_id label anywhere; the plain task is in the worker's other metrics only.
    process_samples = [s for s in found if s[0].startswith("nsjq_process_")]
    assert process_samples and not any("process_id" in labels for _, labels, _ in process_samples)
    assert not any(labels.get("processo") == "plain" for _, labels, _ in process_samples)
    assert total(found, "nsjq_handler_duration_seconds_count", processo="plain") == 1
