"""In-process workers for the pub/sub and webhook tests: settings, a running block, waits, rows.

``worker_settings`` gives short timers and small retries so tests are fast;
``running`` runs a worker in a thread for a ``with`` block and checks it
stopped cleanly (exit code 0) unless the block failed.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from nsj_queue_lib import Settings


def worker_settings(queue, **changes: Any) -> Settings:
    """Settings for a worker on ``queue`` (a tests.helpers.databases queue with a subscriber table)."""
    info = conninfo_to_dict(queue.dsn)
    settings = Settings(
        db_host=info.get("host") or "127.0.0.1",
        db_port=int(info.get("port") or 5432),
        db_name=info.get("dbname") or "postgres",
        db_user=info.get("user") or "postgres",
        db_pass=info.get("password") or "",
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
