"""lock_key's race, replayed by hand (docs/flow-control.md): a new head of a key committed
between two claims' snapshots.

Session A has claimed the key's task (its 'processando' not committed yet); then a task
of the same key with a higher priority commits; then claim B runs. B's snapshot sees
the key free and the new task as its head. Without the unique index of running keys, B
claimed it and two tasks of one key ran at once. With it, B waits for A, is refused,
skips the row and claims nothing: no error reaches the worker, and no liveness lock is
left behind. Every claim path: the claim routine and the socket-server claim.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.helpers.innodb import fresh_read
from tests.helpers.processes import wait_for
from tests.integration.store.backends import execute, fetch

pytestmark = pytest.mark.timeout(60)


def _waits_for_a_lock(backend, session_id: int) -> bool:
    if backend.dialect == "postgres":
        rows = fetch(
            backend.admin,
            "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
            (session_id,),
        )
    else:
        # By the statement's table: the session of a CALL's statement may read as another.
        rows = fresh_read(
            lambda: fetch(
                backend.admin,
                "SELECT 1 FROM information_schema.innodb_trx "
                "WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE %s",
                (f"%{backend.table}%",),
            )
        )
    return bool(rows)


@pytest.mark.parametrize("path", ["routine", "socket"])
def test_a_head_committed_between_two_claims_never_runs_beside_the_running_task(backend, path):
    [first] = [backend.enqueue(lock_key="k", chave_externa="first")]
    holder = backend.client_conn()
    # A: the claim of the key's head, not committed yet.
    execute(
        holder,
        f"UPDATE {backend.table} SET status = 'processando' WHERE {backend.hot}id = %s",
        (first,),
    )
    # The key's new head, committed while A's claim is open.
    head = backend.enqueue(lock_key="k", chave_externa="head", prioridade=90)

    worker = backend.worker()
    outcome: dict[str, Any] = {}

    def claim_b() -> None:
        try:
            if path == "routine":
                claimed = backend.store.claim(worker)
                outcome["task"] = None if claimed is None else claimed.task
            else:
                outcome["task"] = backend.store.claim_uncommitted(worker)
        except BaseException as exc:  # the test reads it below
            outcome["error"] = exc

    b = threading.Thread(target=claim_b)
    b.start()
    # B either waits for A (the index holds the key) or has already claimed (the race).
    wait_for(
        lambda: not b.is_alive() or _waits_for_a_lock(backend, backend.session_id(worker)),
        20,
        "claim B to wait for claim A's commit",
        interval=0.25,
    )
    holder.commit()
    b.join(20)
    assert not b.is_alive()
    assert "error" not in outcome, outcome
    assert outcome["task"] is None, "two tasks of one key were claimed at once"
    assert backend.statuses() == {first: "processando", head: "pendente"}
    assert backend.liveness_lock_holder(head) is None
    if path == "socket":
        backend.store.rollback(worker)

    # Once A's task ends, the key's head is the next claim.
    backend.set_status("sucesso", first)
    claimed = backend.claim(worker)
    assert claimed is not None and claimed.id == head
