"""Fair shares (issue 43 item 2, CONTRACT.md section 8): ``insert_task(..., fair_key=)``.

Among ready tasks of equal ``prioridade``, claims rotate across fair keys
(nsj_queue_lib/fleet/fair.py): the issue's test, 10,000 tasks of tenant A then 10 of
tenant B with two workers, B's ten finish before 5% of A's have run; the turns the
enqueue stamps (round robin, a late key joining the current round, unkeyed tasks as
before, scheduled tasks kept); retries carry the key. In-process workers on PostgreSQL
(direct and through the socket server) and MariaDB; SingleStore refuses fair_key
(before any SQL).
"""

from __future__ import annotations

import datetime

import pytest

from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(240)

BACKENDS = pytest.mark.parametrize(
    "backend",
    ["postgres", "postgres-via-server", pytest.param("mysql", marks=pytest.mark.mysql)],
    indirect=True,
)


def claim_order(backend) -> list[tuple[str | None, int]]:
    """(fair_key, id) of the ready tasks in claim order (prioridade DESC, data_hora, id)."""
    rows = backend.query(
        f"SELECT fair_key, id FROM {backend.table} WHERE status = 'pendente' "
        "ORDER BY prioridade DESC, data_hora, id"
    )
    return [(r["fair_key"], r["id"]) for r in rows]


def noop(payload, tarefa, bd_conn):
    return "ok"


@BACKENDS
def test_a_small_tenant_is_not_starved_by_a_big_backlog(backend):
    """The issue's test: B's ten tasks, enqueued after A's 10,000, all finish before 5% of
    A's have run (two workers)."""
    workers = [backend.run(backend.function_worker(noop, queue_concurrency=1)) for _ in range(2)]
    a_ids = backend.enqueue([dict(processo="a", fair_key="A")] * 10_000, bulk=True)
    b_ids = backend.enqueue([dict(processo="b", fair_key="B")] * 10, bulk=True)
    in_b = ", ".join(str(i) for i in b_ids)

    def b_done() -> bool:
        return backend.value(
            f"SELECT count(*) FROM {backend.table} WHERE id IN ({in_b}) AND status = 'sucesso'"
        ) == len(b_ids)

    wait_for(b_done, 120, "tenant B's ten tasks to finish")
    for worker in workers:
        assert worker.stop() == 0
    last_b = backend.value(f"SELECT max(finished_at) FROM {backend.table} WHERE id IN ({in_b})")
    a_before = backend.value(
        f"SELECT count(*) FROM {backend.table} WHERE fair_key = 'A' AND status = 'sucesso' "
        "AND finished_at <= %s",
        (last_b,),
    )
    print(f"{backend.kind}: {a_before} of A's {len(a_ids)} tasks ran before B's ten finished")
    assert a_before < 0.05 * len(a_ids), (a_before, len(a_ids))
    # Every task of B ran once; A's first attempts keep their real enqueue time.
    assert backend.statuses().get("falha", 0) == 0


@BACKENDS
def test_turns_rotate_across_keys_and_a_late_key_joins_the_current_round(backend):
    # A's backlog, then B's, in separate transactions: the claim order alternates.
    backend.enqueue([dict(fair_key="A")] * 6, bulk=True)
    backend.enqueue([dict(fair_key="B")] * 3)
    order = [key for key, _ in claim_order(backend)]
    assert order == ["A", "B", "A", "B", "A", "B", "A", "A", "A"], order
    # Four claimed and settled: the round goes on from A's third task. A late key C joins
    # the round being served (not behind the backlogs, not ahead of the whole round).
    first_four = [task_id for _, task_id in claim_order(backend)[:4]]
    backend.execute(
        f"UPDATE {backend.table} SET status = 'sucesso' "
        f"WHERE id IN ({', '.join(map(str, first_four))})"
    )
    backend.enqueue([dict(fair_key="C")] * 3)
    order = [key for key, _ in claim_order(backend)]
    assert order == ["A", "B", "C", "A", "C", "A", "C", "A"], order


@BACKENDS
def test_unkeyed_tasks_keep_their_order_and_keyed_ones_their_enqueue_time(backend):
    plain = backend.enqueue([dict(), dict(), dict()])
    keyed = backend.enqueue([dict(fair_key="T1")] * 2 + [dict(fair_key="T2")])
    # A key with no backlog joins the current round: at the head of its prioridade.
    assert [task_id for _, task_id in claim_order(backend)] == [
        plain[0],
        keyed[0],
        keyed[2],
        keyed[1],
        plain[1],
        plain[2],
    ]
    # Another prioridade has rounds of its own; a scheduled task keeps its data_hora.
    later = backend.now() + datetime.timedelta(hours=1)
    [high, scheduled] = backend.enqueue(
        [dict(fair_key="T1", prioridade=90), dict(fair_key="T1", data_hora=later)]
    )
    assert claim_order(backend)[0] == ("T1", high)
    rows = {r["id"]: r for r in backend.rows()}
    assert rows[scheduled]["data_hora"] == later.replace(tzinfo=None) or (
        abs((rows[scheduled]["data_hora"] - later).total_seconds()) < 1e-3
    )
    # The stamp is the task's turn; data_hora_inicial keeps its enqueue time.
    for task_id in keyed:
        assert rows[task_id]["data_hora"] <= rows[task_id]["data_hora_inicial"]
        assert rows[task_id]["fair_key"] in ("T1", "T2")


@BACKENDS
def test_retries_carry_the_fair_key(backend):
    def fail(payload, tarefa, bd_conn):
        raise RuntimeError("boom")

    worker = backend.run(
        backend.function_worker(fail, queue_max_retry=2, queue_base_interval_retry=0.05 / 60)
    )
    [task_id] = backend.enqueue([dict(fair_key="tenant-7")])
    wait_for(lambda: backend.statuses().get("falha", 0) == 2, 30, "both attempts to fail")
    assert worker.stop() == 0
    attempts = backend.rows("id = %s OR id_inicial = %s", (task_id, task_id))
    assert [a["fair_key"] for a in attempts] == ["tenant-7", "tenant-7"]


def test_singlestore_refuses_fair_key_before_any_sql():
    """SingleStore's DDL has no fair key index (the contract lets it refuse, clearly)."""
    from nsj_queue_lib.db.singlestore.store import SingleStoreQueueStore
    from nsj_queue_lib.task_rows import task_row

    store = SingleStoreQueueStore("test.fila")
    base = dict(origem="o", destino="d", processo="p", chave_externa="k", payload="x")
    row = task_row({**base, "fair_key": "A"}, pub_sub=False)
    with pytest.raises(ValueError, match="fair_key is not supported on SingleStore"):
        store.insert_task(None, row)


def test_bad_fair_keys_are_refused_before_any_sql():
    from nsj_queue_lib.task_rows import task_row

    base = dict(origem="o", destino="d", processo="p", chave_externa="k", payload="x")
    for bad, match in [
        (42, "fair_key must be a string or None, got int"),
        (b"A", "fair_key must be a string or None, got bytes"),
        ("", "fair_key must be a non-empty string or None"),
        ("x" * 201, "fair_key is longer than 200 characters"),
    ]:
        with pytest.raises(ValueError, match=match):
            task_row({**base, "fair_key": bad}, pub_sub=False)
    assert task_row({**base, "fair_key": "tenant-42"}, False)["fair_key"] == "tenant-42"
    assert task_row(base, False)["fair_key"] is None
    # seed 000's partition_key is fair_key's alias.
    assert task_row({**base, "partition_key": "p-1"}, False)["fair_key"] == "p-1"
    assert task_row({**base, "partition_key": "p-1", "fair_key": "p-1"}, False)["fair_key"] == "p-1"
    with pytest.raises(ValueError, match="fair_key and partition_key .its alias. differ"):
        task_row({**base, "partition_key": "p-1", "fair_key": "p-2"}, pub_sub=False)
    with pytest.raises(ValueError, match="fair_key must be a non-empty string"):
        task_row({**base, "partition_key": ""}, pub_sub=False)


@BACKENDS
def test_partition_key_is_an_alias_of_fair_key(backend):
    one = backend.enqueue([dict(partition_key="P")])[0]
    two = backend.enqueue([dict(partition_key="P")], bulk=True)[0]
    assert [backend.row(i)["fair_key"] for i in (one, two)] == ["P", "P"]
