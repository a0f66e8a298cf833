"""dedupe_key (CONTRACT.md section 7, docs/flow-control.md) on PostgreSQL and MariaDB.

The unique index of unfinished keys decides: a second insert, even a
concurrent one, writes nothing and returns the first task's id_inicial;
retries keep the key; success, cancel and running out of attempts free it.
"""

from __future__ import annotations

import threading

import pytest

from tests.contract.test_contract import write_exec
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.timeout(60)

RETRY_SECOND = 1 / 60  # minutes: a retry waits long enough to be looked at

DEDUPE_BACKENDS = pytest.mark.parametrize(
    "backend",
    [
        "postgres",
        "postgres-via-server",
        pytest.param("mysql", marks=pytest.mark.mysql),
    ],
    indirect=True,
)


@DEDUPE_BACKENDS
def test_an_unfinished_key_takes_no_second_task(backend):
    [first] = backend.enqueue([dict(dedupe_key="k1", chave_externa="a")])
    [again, other, free] = backend.enqueue(
        [dict(dedupe_key="k1", chave_externa="b"), dict(dedupe_key="k2"), dict()]
    )
    assert again == first
    assert len({first, other, free}) == 3
    # insert_tasks: a key repeated in the batch and one already taken.
    batch = backend.enqueue(
        [dict(dedupe_key="k3"), dict(dedupe_key="k3"), dict(dedupe_key="k1"), dict()], bulk=True
    )
    assert batch[0] == batch[1] and batch[2] == first and batch[3] not in batch[:3]
    assert [r["dedupe_key"] for r in backend.rows()] == ["k1", "k2", None, "k3", None]
    with backend.transaction() as conn:
        client = backend.client(conn)
        with pytest.raises(ValueError, match="dedupe_key is longer than 200"):
            client.insert_task("o", "d", "p", None, "x", dedupe_key="k" * 201)
        with pytest.raises(ValueError, match="lock_key is longer than 200"):
            client.insert_task("o", "d", "p", None, "x", lock_key="k" * 201)
        with pytest.raises(ValueError, match="dedupe_key must be a non-empty"):
            client.insert_tasks(
                [
                    dict(
                        origem="o",
                        destino="d",
                        processo="p",
                        chave_externa=None,
                        payload="x",
                        dedupe_key="",
                    )
                ]
            )
    assert len(backend.rows()) == 5


@DEDUPE_BACKENDS
@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_concurrent_inserts_end_with_one_task(backend, first_ends):
    """The second insert waits for the first's transaction, then returns its task's id
    (or, when that transaction rolls back, writes its own)."""
    first_conn = backend.connect()
    first = backend.client(first_conn).insert_task("o", "d", "p", None, "x", dedupe_key="same")
    result: list[int] = []
    inserted = threading.Event()

    def second() -> None:
        with backend.transaction() as conn:
            result.append(
                backend.client(conn).insert_task("o", "d", "p", None, "y", dedupe_key="same")
            )
        inserted.set()

    thread = threading.Thread(target=second)
    thread.start()
    # The second insert is blocked on the first's uncommitted key.
    assert not inserted.wait(0.5)
    getattr(first_conn, first_ends)()
    first_conn.close()
    thread.join(10)
    assert inserted.is_set()
    rows = backend.rows()
    assert len(rows) == 1
    if first_ends == "commit":
        assert result == [first]
    else:
        assert result == [rows[0]["id"]] and rows[0]["payload"] == "y"


@DEDUPE_BACKENDS
def test_retries_keep_the_key_and_the_end_of_a_task_frees_it(backend):
    fail_first = threading.Event()
    fail_first.set()

    def execute(payload, tarefa, bd_conn):
        if payload == "flaky" and fail_first.is_set():
            fail_first.clear()
            raise RuntimeError("first attempt fails")
        if payload == "doomed":
            raise RuntimeError("always fails")
        write_exec(backend, bd_conn, tarefa)
        return "ok"

    [flaky] = backend.enqueue([dict(dedupe_key="flaky", payload="flaky")])
    backend.run(
        backend.function_worker(
            execute,
            lambda *args: "buried",
            queue_max_retry=2,
            queue_base_interval_retry=RETRY_SECOND,
        )
    )
    # While the retry waits, its key is taken: the insert returns the first attempt's id.
    wait_for(lambda: backend.statuses().get("falha") == 1, 10, "the first attempt to fail")
    [retry] = backend.rows("status <> 'falha'")
    assert (retry["status"], retry["dedupe_key"]) == ("agendada", "flaky")
    assert backend.enqueue([dict(dedupe_key="flaky", payload="flaky")]) == [flaky]
    wait_for(lambda: backend.statuses().get("sucesso") == 1, 10, "the retry to succeed")
    # Success freed the key.
    [again] = backend.enqueue([dict(dedupe_key="flaky", payload="second run")])
    assert again != flaky
    # Running out of attempts frees it too (the dead letter does not carry it).
    [doomed] = backend.enqueue([dict(dedupe_key="doomed", payload="doomed")])
    wait_for(lambda: len(backend.rows("dead AND status = 'sucesso'")) == 1, 15, "the dead letter")
    [doomed_again] = backend.enqueue([dict(dedupe_key="doomed", payload="later")])
    assert doomed_again not in (doomed, flaky, again)
    # A cancelled task frees it.
    later = backend.now().replace(year=backend.now().year + 1)
    [waiting] = backend.enqueue([dict(dedupe_key="cancel me", data_hora=later)])
    with backend.transaction() as conn:
        assert backend.client(conn).cancel_task(waiting) == "cancelada"
    [replacement] = backend.enqueue([dict(dedupe_key="cancel me", data_hora=later)])
    assert replacement != waiting
