"""Two queues in one process (``nsj_queue_lib.run_workers``): the first queue (QUEUE_NAME,
QUEUE_TABLE) served by ``AsyncContractWorker``, the second (GROUP_SECOND_QUEUE,
GROUP_SECOND_TABLE) by the sync ``ContractWorker``, both writing CONTRACT_EXEC_TABLE.

CONTRACT_READY_FILE is written once both dispatchers are connected.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

from nsj_queue_lib import Settings, WorkerGroup
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


def main() -> None:
    first = Settings.from_env(os.environ)
    second = first.with_changes(
        queue_name=os.environ["GROUP_SECOND_QUEUE"],
        queue_table=os.environ["GROUP_SECOND_TABLE"],
        queue_subscriber_table=None,
        queue_concurrency=2,
    )
    group = WorkerGroup(
        [AsyncContractWorker(first, ready_file=""), ContractWorker(second, ready_file="")]
    )
    ready_file = os.environ.get("CONTRACT_READY_FILE")
    if ready_file:
        threading.Thread(target=_signal_ready, args=(group, ready_file), daemon=True).start()
    group.run()


if __name__ == "__main__":
    main()
