"""In-process workers for the pub/sub and webhook tests: settings, a running block, waits, rows.

``worker_settings`` gives short timers and small retries so tests are fast;
``running`` runs a worker in a thread for a ``with`` block and checks it
stopped cleanly (exit code 0) unless the block failed. ``Calls`` collects
what handlers saw; ``RecordingPubSubWorker`` and ``FanOutWorker`` are pub/sub
workers whose handlers record their calls there.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from nsj_queue_lib import Settings, Subscriber, WorkerPubSubBase
from tests.helpers.processes import db_settings


def worker_settings(queue, **changes: Any) -> Settings:
    """Settings for a worker on ``queue`` (a tests.helpers.databases queue with a subscriber table)."""
    settings = Settings(
        **db_settings(queue.dsn),
        queue_name=queue.name,
        queue_table=queue.table,
        queue_subscriber_table=queue.subscriber_table,
        queue_max_retry=3,
        queue_base_interval_retry=0.001,  # minutes: 0.06 s × tentativa
        queue_retry_thread_interval=0.2,
        queue_notify_thread_interval=0.2,
        queue_purge_thread_interval=3600,
        queue_wait_notify_interval=0.5,
        queue_grace_period=2.0,
        queue_concurrency=2,
        default_webhook_timeout=0.5,
    )
    return settings.with_changes(**changes)


@contextlib.contextmanager
def running(worker):
    """Run ``worker`` in a thread for the block; stop it and check it exited with 0."""
    codes: list[int] = []
    thread = threading.Thread(
        target=lambda: codes.append(worker.run_until_stopped(install_signal_handlers=False)),
        name="test-worker",
        daemon=True,
    )
    thread.start()
    failed = False
    try:
        yield worker
    except BaseException:
        failed = True
        raise
    finally:
        deadline = time.monotonic() + 15
        while thread.is_alive() and time.monotonic() < deadline:
            worker.stop()  # a no-op until the runtime exists: repeat until the thread ends
            thread.join(0.05)
        if not failed:
            assert not thread.is_alive(), "the worker did not stop within 15 s"
            assert codes == [0]


def wait_until(predicate, timeout: float = 15.0, what: str = "condition"):
    """Poll ``predicate`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout} s waiting for {what}; last value: {value!r}"
            )
        time.sleep(0.02)


def rows(conn, table: str, where: str = "true", params: tuple = ()) -> list[dict[str, Any]]:
    cur = conn.execute(f"SELECT * FROM {table} WHERE {where} ORDER BY id", params)
    names = [c.name for c in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


class Calls:
    """What handlers saw, thread-safe (executor threads call them concurrently)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[dict[str, Any]] = []

    def add(self, **item: Any) -> None:
        with self._lock:
            self.items.append(item)

    def __len__(self) -> int:
        with self._lock:
            return len(self.items)

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.items)

    def of(self, handler: str) -> list[dict[str, Any]]:
        with self._lock:
            return [i for i in self.items if i["handler"] == handler]

    def handlers(self) -> list[str]:
        with self._lock:
            return sorted(i["handler"] for i in self.items)


class RecordingPubSubWorker(WorkerPubSubBase):
    """A pub/sub worker whose handlers ``record`` each call on ``self.calls``."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.calls = Calls()

    def in_transaction(self, bd_conn) -> bool:
        """Whether ``bd_conn`` (psycopg 3) is inside a transaction."""
        return bd_conn.info.transaction_status.name == "INTRANS"

    def record(self, handler: str, payload, subscription, tarefa, bd_conn) -> str:
        self.calls.add(
            handler=handler,
            payload=payload,
            subscription=subscription,
            tarefa=dict(tarefa),
            in_transaction=self.in_transaction(bd_conn),
        )
        return f"{handler} ok"


class FanOutWorker(RecordingPubSubWorker):
    """Methods for the subscribers "estoque", "financeiro" and "todos"; ``must_not_run`` for
    the subscribers a publication must never reach (inactive, another processo, tenant, grupo)."""

    @Subscriber("estoque")
    def estoque(self, payload, subscription, tarefa, bd_conn) -> str:
        return self.record("estoque", payload, subscription, tarefa, bd_conn)

    @Subscriber("financeiro")
    def financeiro(self, payload, subscription, tarefa, bd_conn) -> str:
        return self.record("financeiro", payload, subscription, tarefa, bd_conn)

    @Subscriber("todos")
    def todos(self, payload, subscription, tarefa, bd_conn) -> str:
        return self.record("todos", payload, subscription, tarefa, bd_conn)

    @Subscriber("inativo")
    @Subscriber("outro_processo")
    @Subscriber("outro_tenant")
    @Subscriber("outro_grupo")
    def must_not_run(self, payload, subscription, tarefa, bd_conn) -> str:
        return self.record("must_not_run", payload, subscription, tarefa, bd_conn)
