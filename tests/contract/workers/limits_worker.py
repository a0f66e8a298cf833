"""The contract worker with per-processo limits declared from the environment.

LIMITS_SPEC (JSON): {"processo": {"max_concurrent": 2, "rate_limit": "5/s", ...}, ...}
(any ``@Task`` option: ``"circuit_breaker": [3, 2.0]`` too);
each processo gets an ``@Task`` method with those options that runs as
``ContractWorker.execute`` does (records the execution, sleeps as the payload says).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from nsj_queue_lib import Task
from tests.contract.workers.contract_worker import ContractWorker


def limits_worker_class(spec: dict[str, dict[str, Any]]) -> type[ContractWorker]:
    methods = {}
    for index, (processo, options) in enumerate(sorted(spec.items())):

        def handler(self, payload, tarefa, bd_conn):
            return ContractWorker.execute(self, payload, tarefa, bd_conn)

        handler.__name__ = f"on_limited_{index}"
        for pair in ("interval_s", "circuit_breaker"):  # JSON has lists, the options pairs
            if pair in options:
                options = {**options, pair: tuple(options[pair])}
        methods[handler.__name__] = Task(processo, **options)(handler)
    return type("LimitsWorker", (ContractWorker,), methods)


if __name__ == "__main__":
    limits_worker_class(json.loads(os.environ.get("LIMITS_SPEC", "{}")))().run()
