"""The contract worker with a periodic processo: ``tick`` every PERIODIC_EVERY_S seconds
(default 1), recorded like any contract task (the slot is its chave_externa)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

from nsj_queue_lib import Task
from tests.contract.workers.contract_worker import ContractWorker

EVERY_S = int(os.environ.get("PERIODIC_EVERY_S", "1"))


class PeriodicWorker(ContractWorker):
    @Task("tick", every_s=EVERY_S, cron_payload={"source": "periodic_worker"})
    def tick(self, payload, tarefa, bd_conn):
        return self.execute(payload, tarefa, bd_conn)


if __name__ == "__main__":
    PeriodicWorker().run()
