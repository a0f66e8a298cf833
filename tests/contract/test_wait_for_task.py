"""QueueClient.wait_for_task (CONTRACT.md section 8) on PostgreSQL, MariaDB and the socket
server: it returns get_task's dict once the task finished, seen from a transaction that
began before the task ended (MariaDB's REPEATABLE READ included), shortly after the
commit; TimeoutError otherwise; NotFoundError for an unknown id."""

from __future__ import annotations

import statistics
import time

import pytest

from nsj_queue_lib.exceptions import NotFoundError
from tests.contract.test_dependencies import DEPENDENCY_BACKENDS

pytestmark = pytest.mark.timeout(60)


def lag_after_commit(backend, conn) -> float:
    """Seconds since the latest task's end, by the database's clock."""
    if backend.family == "postgres":
        since = "extract(epoch FROM clock_timestamp() - max(finished_at))"
    else:
        since = "TIMESTAMPDIFF(MICROSECOND, MAX(finished_at), NOW(6)) / 1e6"
    sql = f"SELECT {since} FROM {backend.table}"
    return float(backend.value(sql, conn=conn))


@DEPENDENCY_BACKENDS
def test_wait_for_task_sees_the_end_whatever_the_isolation(backend):
    """The waiter's connection is not autocommit (REPEATABLE READ on MariaDB): each look sees
    the latest commit; inside an open transaction MariaDB's wait is refused (its snapshot
    would hide the end)."""
    worker = backend.run(backend.function_worker(lambda p, t, c: f"done {p}"))
    lags = []
    with backend.transaction() as waiter:
        client = backend.client(waiter)
        if backend.family != "postgres":
            backend.value(f"SELECT count(*) FROM {backend.table}", conn=waiter)  # a snapshot
            backend.execute(f"INSERT INTO {backend.exec_table} (task_id) VALUES (0)", conn=waiter)
            with pytest.raises(ValueError, match="commit"):
                client.wait_for_task(987654321, 1)
            waiter.rollback()
            backend.value(f"SELECT count(*) FROM {backend.table}", conn=waiter)  # a snapshot
        for n in range(7):
            [task_id] = backend.enqueue([dict(payload=str(n))])
            view = client.wait_for_task(task_id, 10)
            lags.append(lag_after_commit(backend, waiter))
            waiter.rollback()
            assert (view["id_inicial"], view["status"], view["mensagem"]) == (
                task_id,
                "sucesso",
                f"done {n}",
            )
    assert worker.stop() == 0
    # Seen within 50 ms of the task's end on PostgreSQL (the median of 7: the machine is
    # shared); through the socket server and on MariaDB, within a poll of the commit.
    assert statistics.median(lags) < (0.05 if backend.kind == "postgres" else 0.25), lags


@DEPENDENCY_BACKENDS
def test_wait_for_task_times_out_and_refuses_unknown_ids(backend):
    [task_id] = backend.enqueue([dict()])  # no worker runs it
    with backend.transaction() as conn:
        client = backend.client(conn)
        conn.rollback()
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="still pendente"):
            client.wait_for_task(task_id, 0.3)
        assert 0.3 <= time.monotonic() - started < 2
        with pytest.raises(NotFoundError):
            client.wait_for_task(987654321, 0.1)
        assert client.cancel_task(task_id) == "cancelada"
    with backend.transaction() as conn:
        assert backend.client(conn).wait_for_task(task_id, 0)["status"] == "cancelada"
