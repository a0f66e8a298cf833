"""``examples/process_instance.py`` runs as written: its worker as a real process, then the
script's ``enqueue`` mode, which starts two payments, captures one with a synchronous call
and prints how each ended (PostgreSQL, ``pg_dsn``)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.helpers.processes import clean_env, db_env, run_python, script_process, stop_script

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "process_instance.py"


@pytest.mark.slow
def test_the_process_example_runs_as_written(pg_dsn, pg_queue, pg_admin):
    env = clean_env(**db_env(pg_dsn), QUEUE_NAME=pg_queue.name, QUEUE_TABLE=pg_queue.table)
    with script_process(EXAMPLE, env) as worker:
        done = run_python(str(EXAMPLE), "enqueue", env=env, timeout=60)
        if done.returncode != 0:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
            pytest.fail(_what_happened(done, worker.stdout.read(), pg_admin, pg_queue.table))
        assert done.stdout.splitlines() == [
            '{"captured": 100}',
            "pay-1 settled ['created', 'captured', 'settled'] {'amount': 100, 'captured': True}",
            "pay-2 voided ['created', 'voided'] {'amount': 7, 'captured': False}",
        ]
        stop_script(worker)


def _what_happened(done, worker_output: str, admin, table: str) -> str:
    """A failed run's story: the client's output, the worker's, and every task's row."""
    rows = admin.execute(
        f"SELECT id, processo, status, data_hora, started_at, finished_at, mensagem "
        f"FROM {table} ORDER BY id"
    ).fetchall()
    return "\n".join(
        [
            "the client:",
            done.stdout,
            done.stderr,
            "the worker:",
            worker_output,
            "the tasks:",
            *map(repr, rows),
        ]
    )
