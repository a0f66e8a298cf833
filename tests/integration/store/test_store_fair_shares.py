"""Fair shares through the claim routines themselves (nsj_queue_lib/fleet/fair.py): the
turns the enqueue stamps are the order the claim function (PostgreSQL) and the claim
procedure (MariaDB) take, plain and partitioned; a late key joins the round being served;
psycopg2's client stamps as psycopg 3's; SingleStore's refuses."""

from __future__ import annotations

import pytest

from tests.integration.store.backends import CLIENT_PATHS, LOCKING, ago, on
from tests.integration.store.test_store_claim import drain


def keys_of(backend, claims) -> list[str | None]:
    return [backend.row(c.task.id)["fair_key"] for c in claims]


@on(*LOCKING)
def test_claims_rotate_across_keys_and_a_late_key_joins_the_round(backend, store, worker):
    backend.enqueue(*[{"fair_key": "A"}] * 4)  # one insert_tasks call
    b1 = backend.enqueue(fair_key="B")  # one insert_task each
    b2 = backend.enqueue(fair_key="B")
    first = store.claim(worker)
    claims = [first]
    for _ in range(2):
        claims.append(store.complete_and_claim(worker, claims[-1].task.id, "ok", claim_next=True))
    assert keys_of(backend, claims) == ["A", "B", "A"]
    assert claims[1].task.id == b1
    store.complete_and_claim(worker, claims[-1].task.id, "ok", claim_next=False)
    # Left: B's second (turn +1), A's third and fourth (+2, +3). C joins at the head.
    c1, c2 = backend.enqueue({"fair_key": "C"}, {"fair_key": "C"})
    rest = drain(store, worker)
    assert [c.task.id for c in rest][:2] == [b2, c1]
    assert keys_of(backend, rest) == ["B", "C", "A", "C", "A"]
    assert c2 in [c.task.id for c in rest]


@on(*LOCKING)
def test_prioridade_comes_before_turns_and_scheduled_tasks_keep_their_time(backend, store, worker):
    backend.enqueue(*[{"fair_key": "A"}] * 3)
    high = backend.enqueue(fair_key="B", prioridade=90)
    old_plain = backend.enqueue(data_hora=ago(60))  # older than every turn: first
    scheduled = backend.enqueue(fair_key="B", data_hora=ago(-3600))  # not due
    claims = drain(store, worker)
    assert [c.task.id for c in claims][:2] == [high, old_plain]
    assert keys_of(backend, claims)[2:] == ["A", "A", "A"]
    assert backend.row(scheduled)["status"] == "pendente"


@on(*CLIENT_PATHS)
def test_every_client_path_stores_the_key_and_its_turn(backend):
    if backend.kind == "singlestore":  # refused, before any SQL
        with pytest.raises(ValueError, match="fair_key is not supported on SingleStore"):
            backend.enqueue({"fair_key": "T"})
        return
    plain = backend.enqueue()
    keyed = backend.enqueue({"fair_key": "T"}, {"fair_key": "T"})
    row = backend.row(keyed[0])
    assert row["fair_key"] == "T"
    assert backend.row(plain)["fair_key"] is None
    # The key had no backlog: its first turn is the head (the plain task's data_hora).
    assert row["data_hora"] == backend.row(plain)["data_hora"]
    assert row["data_hora_inicial"] >= row["data_hora"]
