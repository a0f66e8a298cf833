"""``examples/durable_steps.py`` and ``examples/durable_waits.py`` run as written: each
worker as a real process, then the script's ``enqueue`` mode, which waits for the tasks
and prints their ``mensagem`` (PostgreSQL, ``pg_dsn``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.processes import clean_env, db_env, run_python, script_process, stop_script

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.slow
def test_the_durable_examples_run_as_written(pg_dsn, pg_queue, pg_autocommit):
    env = clean_env(**db_env(pg_dsn), QUEUE_NAME=pg_queue.name, QUEUE_TABLE=pg_queue.table)
    try:
        with (
            script_process(EXAMPLES / "durable_steps.py", env) as steps,
            script_process(EXAMPLES / "durable_waits.py", env) as waits,
        ):
            done = run_python(str(EXAMPLES / "durable_steps.py"), "enqueue", env=env, timeout=60)
            assert done.returncode == 0, done.stderr
            assert done.stdout.splitlines() == [
                json.dumps(
                    [{"order": "o-1", "done": "reserved"}, {"order": "o-1", "done": "charged"}]
                ),
                "2 lines imported",
            ]
            waited = run_python(str(EXAMPLES / "durable_waits.py"), "enqueue", env=env, timeout=60)
            assert waited.returncode == 0, waited.stderr
            post, remind = waited.stdout.splitlines()
            assert post == '"published, approved by editor"'
            assert remind.startswith('"reminded twice, 5.') or remind.startswith(
                '"reminded twice, 6.'
            )
            stop_script(steps)
            stop_script(waits)
        ledger = pg_autocommit.execute(
            "SELECT order_id, what FROM durable_example_ledger ORDER BY order_id, what"
        ).fetchall()
        assert ledger == [("import", "a"), ("import", "b"), ("o-1", "charged"), ("o-1", "reserved")]
    finally:
        pg_autocommit.execute("DROP TABLE IF EXISTS durable_example_ledger")
