"""The claim function reads the running lock keys and the limited processos once per claim,
as hashed sets (db/postgres/claim_sets.py, issue 19).

What must not change: a task whose key is running is never claimed (also when many keys
are running, and with statistics that no longer describe the table), a task of a limited
processo is left to the limited claim, a task without processo is claimable. And the plan:
each set read once per claim statement, never once per candidate row.
"""

from __future__ import annotations

import re

import pytest

from nsj_queue_lib.db.limits_store import LimitsStore
from nsj_queue_lib.flow.limits import ProcessoLimits
from tests.helpers.pg_plans import load_auto_explain
from tests.integration.store.backends import fetch

pytestmark = [pytest.mark.backends("postgres"), pytest.mark.timeout(60)]


def _claim(backend, worker, limit: int) -> list[int]:
    rows = backend.store.claim_call(worker, None, None, limit, b"COMMIT", begin=True)
    return [row["id"] for row in rows]


def _running_keys(backend) -> list[str]:
    rows = fetch(
        backend.admin,
        f"SELECT lock_key FROM {backend.table} WHERE status = 'processando' ORDER BY lock_key",
    )
    return [row["lock_key"] for row in rows]


def test_with_hundreds_of_keys_running_only_the_idle_keys_heads_are_claimed(backend):
    busy = [f"busy{i:03d}" for i in range(300)]
    heads = backend.enqueue(*[dict(lock_key=key) for key in busy])
    waiting = backend.enqueue(*[dict(lock_key=key) for key in busy])
    worker = backend.worker()
    # 300 keys running (the running-key set of the claims below).
    assert sorted(_claim(backend, worker, 300)) == sorted(heads)
    idle = backend.enqueue(*[dict(lock_key=f"idle{i}") for i in range(5)])
    backend.enqueue(*[dict(lock_key=f"idle{i}") for i in range(5)])  # second tasks: wait
    free = backend.enqueue(dict())

    # A busy key's task would be refused by the unique index of running keys and the
    # claim retried: it would come back short, or empty. It takes exactly these.
    assert _claim(backend, worker, 50) == [*idle, *free]
    assert _claim(backend, worker, 50) == []
    assert len(_running_keys(backend)) == 306
    assert all(backend.row(task_id)["status"] == "pendente" for task_id in waiting)


def test_a_task_of_a_limited_processo_waits_and_one_without_processo_is_claimed(backend):
    admin = backend.client_conn()
    LimitsStore(backend.dialect, backend.table, backend.store).declare(
        admin, ProcessoLimits("limited", max_concurrent=1), "test"
    )
    admin.commit()
    backend.enqueue(processo="limited")
    plain = backend.enqueue(processo="plain")
    [row] = fetch(
        backend.admin,
        f"INSERT INTO {backend.table} (origem, destino, processo, chave_externa, payload)"
        " VALUES ('o', 'd', NULL, 'none', '{}') RETURNING id",
    )
    worker = backend.worker()
    # A NULL processo against the set of limited ones: claimable (NOT IN alone says NULL).
    assert _claim(backend, worker, 10) == [plain, row["id"]]


def _window_claim_plan(backend, worker, limit: int) -> tuple[list[int], str]:
    """Claim, with the plans of the claim function's statements sent back as notices
    (auto_explain); the window claim's plan."""
    notices: list[str] = []
    worker.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
    load_auto_explain(worker)
    for setting, value in (
        ("log_min_duration", "0"),
        ("log_analyze", "on"),
        ("log_timing", "off"),
        ("log_nested_statements", "on"),
        ("log_level", "notice"),
    ):
        worker.execute(f"SET auto_explain.{setting} = '{value}'")
    # A look-up, not a claim from the position the last claim left (claim_function.sql).
    worker.execute("SELECT set_config('nsjq.claim_position', '', false)")
    claimed = _claim(backend, worker, limit)
    worker.execute("SET auto_explain.log_min_duration = -1")
    plans = [text for text in notices if "q.prioridade = edge_prioridade" in text]
    assert plans, notices
    return claimed, plans[0]


@pytest.mark.fresh_queue  # plans from the table's statistics
@pytest.mark.parametrize("statistics", ["of an empty table", "of running tasks only"])
def test_each_set_is_read_once_per_claim_whatever_the_statistics_say(backend, statistics):
    if statistics == "of an empty table":
        backend.execute(f"ANALYZE {backend.table}")
    keys = [f"k{i:02d}" for i in range(40)]
    heads = backend.enqueue(*[dict(lock_key=key) for key in keys])
    backend.enqueue(*[dict(lock_key=key) for _ in range(4) for key in keys])
    worker = backend.worker()
    assert sorted(_claim(backend, worker, 36)) == sorted(heads[:36])  # 36 of 40 keys running
    if statistics == "of running tasks only":
        backend.execute(f"ANALYZE {backend.table}")

    claimed, plan = _window_claim_plan(backend, worker, 10)
    assert claimed == heads[36:]
    assert plan.count("hashed SubPlan") == 2, plan
    # The running keys: one scan of their index for the whole claim.
    scans = re.findall(r"Scan using \S+_lock_key_running on .*loops=(\d+)\)", plan)
    assert scans == ["1"], plan
