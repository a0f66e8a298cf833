"""examples/workflow_diamond.py runs as written: its worker process drains the workflow
its ``enqueue`` builds, and ``enqueue`` prints the workflow's view (PostgreSQL)."""

from __future__ import annotations

import pytest

from tests.helpers.processes import clean_env, db_env, run_python, script_process, stop_script
from tests.integration.test_examples import EXAMPLES


@pytest.mark.slow
def test_the_diamond_example_runs(pg_dsn, pg_queue):
    env = clean_env(**db_env(pg_dsn), QUEUE_NAME=pg_queue.name, QUEUE_TABLE=pg_queue.table)
    with script_process(EXAMPLES / "workflow_diamond.py", env) as worker:
        done = run_python(str(EXAMPLES / "workflow_diamond.py"), "enqueue", env=env, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert lines[0].endswith("(nightly 2026-11-28): succeeded"), done.stdout
        assert [line.split()[1] for line in lines[1:]] == [
            "extrair",
            "transformar",
            "validar",
            "carregar",
        ]
        assert lines[-1].endswith("loaded after transformed, validated")
        stop_script(worker)
