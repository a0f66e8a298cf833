"""Several queues in one process (issue 18 item 4): ``WorkerGroup`` / ``run_workers``.

A real process (``workers/group_worker.py``) serves two queues of one
database: an async worker on the backend's queue, a sync one on a second
queue. SIGTERM stops both (exit 0, in-flight work finished); HALT on one
queue stops only that queue's part.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from nsj_queue_lib import WorkerGroup
from nsj_queue_lib.runtime.worker_runtime import EXIT_THREAD_DIED
from nsj_queue_lib.worker_group import EXIT_WORKER_DIED
from tests.contract.workers.async_worker import AsyncContractWorker
from tests.contract.workers.contract_worker import ContractWorker
from tests.helpers.processes import wait_for

GROUP_WORKER = Path(__file__).resolve().parent / "workers" / "group_worker.py"
BOTH = ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)]


def start_group(backend, second, **overrides):
    return backend.start_process(
        "group",
        script=GROUP_WORKER,
        GROUP_SECOND_QUEUE=second.name,
        GROUP_SECOND_TABLE=second.table,
        QUEUE_CONCURRENCY="4",
        **overrides,
    )


@pytest.mark.parametrize("backend", BOTH, indirect=True)
def test_sigterm_stops_every_queue_of_a_group_process_after_its_running_tasks(backend, second):
    group = start_group(backend, second)
    [a] = backend.enqueue([dict(processo="async", payload="{}")])
    [b] = second.enqueue([dict(processo="sync", payload="{}")])
    wait_for(
        lambda: backend.statuses() == {"sucesso": 1} and second.statuses() == {"sucesso": 1},
        15,
        "a task of each queue to succeed",
    )
    # In flight when SIGTERM arrives: both finish within the grace period (5 s).
    [slow_a] = backend.enqueue(
        [dict(processo="async", payload=json.dumps({"sleep": 0.8, "started": True}))]
    )
    [slow_b] = second.enqueue([dict(processo="sync", payload=json.dumps({"sleep": 0.8}))])
    wait_for(
        lambda: backend.started_ids() == [slow_a] and second.row(slow_b)["status"] == "processando",
        10,
        "both slow tasks to start",
    )
    group.send(signal.SIGTERM)
    assert group.wait(15) == 0
    assert backend.row(slow_a)["status"] == "sucesso"
    assert second.row(slow_b)["status"] == "sucesso"
    log = group.output()
    assert f"queue={backend.name}: worker stopped (exit code 0)" in log
    assert f"queue={second.name}: worker stopped (exit code 0)" in log


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_halt_on_one_queue_stops_only_that_queues_part_of_the_process(backend, second):
    group = start_group(backend, second)
    backend.admin.execute(f"NOTIFY {backend.name}, 'HALT'")
    wait_for(lambda: f"queue={backend.name}: stopped (HALT)" in group.output(), 15, "the HALT")
    [a] = backend.enqueue([dict(processo="async", payload="{}")])
    [b] = second.enqueue([dict(processo="sync", payload="{}")])
    wait_for(lambda: second.row(b)["status"] == "sucesso", 10, "the other queue to go on")
    assert group.alive()
    assert backend.row(a)["status"] == "pendente"  # nobody serves the halted queue here
    group.send(signal.SIGTERM)
    assert group.wait(15) == 0


@pytest.mark.parametrize("backend", BOTH, indirect=True)
def test_a_crashed_runtime_stops_the_other_queues_gracefully_and_the_process_exits_3(
    backend, second
):
    """Issue 37: the second queue's runtime raises (its supervisor, an unexpected exception).
    Before, that thread just ended: the first queue went on, and the process exited 0 once
    stopped, so Kubernetes never restarted the pod for the dead queue."""
    crash = backend.directory / f"{second.name}.crash"
    group = start_group(backend, second, GROUP_CRASH_FILE=str(crash))
    [a] = backend.enqueue([dict(processo="async", payload="{}")])
    wait_for(lambda: backend.row(a)["status"] == "sucesso", 15, "the first queue to serve")
    # In flight when the other queue crashes: finished within the grace period (5 s).
    [slow] = backend.enqueue(
        [dict(processo="async", payload=json.dumps({"sleep": 1.5, "started": True}))]
    )
    wait_for(lambda: backend.started_ids() == [slow], 10, "the slow task to start")
    crash.touch()
    assert group.wait(20) == EXIT_WORKER_DIED == EXIT_THREAD_DIED, group.output()
    assert backend.row(slow)["status"] == "sucesso"
    log = group.output()
    assert f"queue={second.name}: worker crashed" in log, log
    assert "RuntimeError: fake runtime crash" in log, log
    assert f"queue={second.name}: stopped with exit code 3; stopping every queue" in log, log
    assert f"queue={backend.name}: worker stopped (exit code 0)" in log, log


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_workers_of_one_database_share_one_pool_sized_for_all(backend, second):
    group = WorkerGroup(
        [
            AsyncContractWorker(
                backend.settings(queue_concurrency=50, queue_pool_size=3),
                exec_table=backend.exec_table,
                ready_file="",
            ),
            ContractWorker(
                second.settings(queue_concurrency=2),
                exec_table=second.exec_table,
                ready_file="",
            ),
        ]
    )
    group._build()
    [pool] = group.pools.values()
    assert [r.pool for r in group.runtimes] == [pool, pool]
    assert pool.min_size == 3 + 2


def test_a_group_refuses_two_workers_of_one_queue_and_workers_without_settings(tmp_path):
    from nsj_queue_lib import Settings

    settings = Settings(db_host="h", db_name="d", db_user="u", queue_name="q", queue_table="t")
    with pytest.raises(ValueError, match="needs its Settings"):
        WorkerGroup(
            [
                ContractWorker(settings, exec_table="x", ready_file=""),
                ContractWorker(None, exec_table="x", ready_file=""),
            ]
        )
    group = WorkerGroup(
        [
            ContractWorker(settings, exec_table="x", ready_file=""),
            ContractWorker(settings, exec_table="x", ready_file=""),
        ]
    )
    assert group.run_until_stopped(install_signal_handlers=False) == 2


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_worker_that_fails_stops_the_whole_group_with_its_exit_code(backend):
    """A queue whose table is missing refuses to start (exit code 2): the other queue of the
    process stops too, rather than running on while the process looks healthy."""
    healthy = AsyncContractWorker(backend.settings(), exec_table=backend.exec_table, ready_file="")
    missing = ContractWorker(
        backend.settings(queue_name="cq_missing", queue_table="public.cq_missing_table"),
        exec_table=backend.exec_table,
        ready_file="",
    )
    group = WorkerGroup([healthy, missing])
    assert group.run_until_stopped(install_signal_handlers=False) == 2
    assert all(r.stop_event.is_set() for r in group.runtimes)
