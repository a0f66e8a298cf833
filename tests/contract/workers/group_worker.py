"""Two queues in one process (``nsj_queue_lib.run_workers``): the first queue (QUEUE_NAME,
QUEUE_TABLE) served by ``AsyncContractWorker``, the second (GROUP_SECOND_QUEUE,
GROUP_SECOND_TABLE) by the sync ``ContractWorker``, both writing CONTRACT_EXEC_TABLE.

CONTRACT_READY_FILE is written once both dispatchers are connected. With GROUP_CRASH_FILE
set, the second queue's runtime is a fake that crashes: its supervisor raises once that file
exists, as an unexpected exception inside a runtime would.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

from nsj_queue_lib import Settings, WorkerGroup
from nsj_queue_lib.runtime.worker_runtime import WorkerRuntime
from tests.contract.workers.async_worker import AsyncContractWorker
from tests.contract.workers.contract_worker import ContractWorker


def _signal_ready(group: WorkerGroup, ready_file: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runtimes = list(group.runtimes)
        if len(runtimes) == 2 and all(r.dispatcher._control is not None for r in runtimes):
            Path(ready_file).write_text(str(os.getpid()))
            return
        time.sleep(0.01)


def _crash_when(runtime: WorkerRuntime, trigger: Path) -> None:
    """Make ``runtime``'s supervisor raise once ``trigger`` exists (a crashed runtime)."""

    def supervise(threads: list, executor: object) -> int:
        while not trigger.exists():
            if runtime.stop_event.wait(0.05):
                return 0
        raise RuntimeError(f"fake runtime crash ({trigger.name} appeared)")

    runtime._supervise = supervise  # type: ignore[method-assign]


def main() -> None:
    first = Settings.from_env(os.environ)
    second = first.with_changes(
        queue_name=os.environ["GROUP_SECOND_QUEUE"],
        queue_table=os.environ["GROUP_SECOND_TABLE"],
        queue_subscriber_table=None,
        queue_concurrency=2,
    )
    crashing = ContractWorker(second, ready_file="")
    crash_file = os.environ.get("GROUP_CRASH_FILE")
    if crash_file:
        make_runtime = crashing.make_runtime

        def make_crashing_runtime(*args, **kwargs) -> WorkerRuntime:
            runtime = make_runtime(*args, **kwargs)
            _crash_when(runtime, Path(crash_file))
            return runtime

        crashing.make_runtime = make_crashing_runtime  # type: ignore[method-assign]
    group = WorkerGroup([AsyncContractWorker(first, ready_file=""), crashing])
    ready_file = os.environ.get("CONTRACT_READY_FILE")
    if ready_file:
        threading.Thread(target=_signal_ready, args=(group, ready_file), daemon=True).start()
    group.run()


if __name__ == "__main__":
    main()
