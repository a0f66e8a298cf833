"""A worker process refuses a queue this version cannot serve, on every backend.

The worker checks the queue once at start (``bind``): its table, and the claim
routine ``db_gen`` creates next to it (the PostgreSQL function, the MySQL
procedure) by the version in its COMMENT. There is one claim path per
dialect and no fallback: a queue whose routine is missing (DDL of an older
version) or of another version makes the process exit with code 2 and a last
stderr line naming the command that brings the queue up to date, before it
claims anything. SingleStore queues have no claim routine (no stored
procedures are used there); their table is still checked.
"""

from __future__ import annotations

import pytest

from nsj_queue_lib.db.dialect import CLAIM_ROUTINE_RELEASE
from tests.helpers.databases import comment_claim_routine_sql, drop_claim_routine_sql

pytestmark = pytest.mark.timeout(60)

EXIT_CONFIG_ERROR = 2
OTHER_VERSION = "nsj_queue_lib claim 0000000000000000"
STATES = ["table missing", "claim routine missing", "claim routine of another version"]


def routine(backend) -> str:
    return f"{backend.schema}.claim_next_{backend.name}_v{CLAIM_ROUTINE_RELEASE}"


def break_the_queue(backend, state: str) -> None:
    if state == "table missing":
        if backend.family == "postgres":
            backend.execute(f"DROP TABLE {backend.table} CASCADE")
        else:
            backend.execute(f"DROP TABLE {backend.table}")
    elif state == "claim routine missing":
        backend.execute(drop_claim_routine_sql(backend.family == "postgres", routine(backend)))
    else:
        postgres = backend.family == "postgres"
        backend.execute(comment_claim_routine_sql(postgres, routine(backend), OTHER_VERSION))


@pytest.mark.parametrize("state", STATES)
def test_a_worker_process_refuses_a_queue_it_cannot_serve_with_exit_code_2(state, backend):
    if state != "table missing" and backend.driver == "SINGLE_STORE":
        pytest.skip("SingleStore queues have no claim routine")
    [task] = backend.enqueue([dict(payload="waits")])
    break_the_queue(backend, state)
    worker = backend.start_process("refused", wait_ready=False)
    code = worker.wait(30)
    last = worker.last_line()
    assert code == EXIT_CONFIG_ERROR, worker.output()[-3000:]
    if state == "table missing":
        assert last.startswith("nsj_queue_lib: QUEUE_TABLE: table ") and "db_gen" in last, last
        return
    assert last.startswith("nsj_queue_lib: the queue's claim routine "), last
    assert f"claim_next_{backend.name}_v{CLAIM_ROUTINE_RELEASE}" in last and "--upgrade" in last, (
        last
    )
    if state == "claim routine missing":
        assert "is missing" in last, last
    else:
        assert "from another version" in last and OTHER_VERSION in last, last
    # Nothing was claimed, nothing ran.
    assert backend.row(task)["status"] == "pendente"
    assert backend.exec_rows() == [] and backend.started_ids() == []
