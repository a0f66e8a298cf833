"""A test worker: records each execution in ``$TEST_EXEC_TABLE`` in the task's transaction.

The payload (JSON, optional) steers it:
  {"sleep": 2.5}            sleep that many seconds inside the handler
  {"sleep_on": [1]}         ... only on these attempts (``tentativa``)
  {"until": "/path"}        ... or less: until that file exists (the test says when)
  {"fail_on": [1, 2]}       raise on these attempts (after writing: the write must roll back)
  {"started": true}         first record the start in ``$TEST_STARTED_TABLE`` on a
                            separate autocommit connection (visible at once)
Run as ``python recording_worker.py`` with the worker's environment variables.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[3])
)  # the repository, for a source checkout

from tests.contract.workers.contract_worker import ContractWorker


class RecordingWorker(ContractWorker):
    """The contract suite's worker on the tables named by $TEST_EXEC_TABLE / $TEST_STARTED_TABLE."""

    def __init__(self) -> None:
        super().__init__(
            exec_table=os.environ["TEST_EXEC_TABLE"],
            started_table=os.environ["TEST_STARTED_TABLE"],
            ready_file="",
        )


if __name__ == "__main__":
    RecordingWorker().run()
