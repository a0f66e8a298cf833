"""What every dialect's store offers: the operations the client and the runtime call.

``PostgresQueueStore``, ``MysqlQueueStore`` and ``SingleStoreQueueStore``
implement this protocol (a unit test checks their signatures against it);
the runtime is typed against it, not against one database. A store that
cannot do an operation on its database (SingleStore has no named locks)
still has the method and raises ``ConfigError`` saying what to configure.

Connections: client operations run in the caller's transaction; runtime
operations take autocommit worker connections and open and end transactions
themselves, so ``claim`` and ``complete_and_claim`` return with the next
task's transaction open (or the connection idle when nothing was claimed).
Driver errors leave a store as ``DatabaseError`` with the driver's error as
``__cause__``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

Task = dict[str, Any]


class QueueStore(Protocol):
    queue_table: str
    subscriber_table: str | None

    # -- client operations (the caller's connection and transaction) --

    def insert_task(self, conn, row: dict[str, Any]) -> int: ...

    def insert_tasks(self, conn, rows: Sequence[dict[str, Any]]) -> list[int]: ...

    def list_equivalent(
        self, conn, chave_externa: str | None, payload_hash: bytes | None, statuses: Sequence[str]
    ) -> list[Task]: ...

    def get_task(self, conn, task_id: int) -> Task | None: ...

    def list_subscribers(
        self, conn, processo: str, tenant: int | None, grupo_empresarial: str | None
    ) -> list[dict[str, Any]]: ...

    def insert_deliveries(
        self, conn, publication: Task, deliveries: Sequence[tuple[Any, str | None, bytes | None]]
    ) -> list[int]: ...

    # -- connection and transaction control (worker connections) --

    def configure_connection(self, conn) -> None: ...

    def configure_executor_connection(self, conn) -> None: ...

    def queue_oid(self, conn) -> int: ...

    def begin(self, conn) -> None: ...

    def commit(self, conn) -> None: ...

    def rollback(self, conn) -> None: ...

    def terminate_session(self, admin_conn, victim_conn) -> None: ...

    # -- claiming and settling --

    def task_lock_keys(self, queue_oid: int, task_id: int) -> tuple[int, int]: ...

    def claim(self, conn, limit: int, queue_key: int) -> list[Task]: ...

    def complete_and_claim(
        self, conn, task_id: int, mensagem: str, keys: tuple[int, int], limit: int, queue_key: int
    ) -> list[Task]: ...

    def claim_uncommitted(self, conn, limit: int) -> list[Task]: ...

    def commit_and_begin(self, conn) -> None: ...

    def complete_if_running(self, conn, task_id: int, mensagem: str) -> bool: ...

    def unlock_task(self, conn, keys: tuple[int, int]) -> None: ...

    def fail_and_retry(
        self, conn, task_id: int, status: str, mensagem: str, delay_seconds: float
    ) -> int | None: ...

    def fail_and_bury(
        self, conn, task_id: int, status: str, mensagem: str, payload: str | None
    ) -> int | None: ...

    def fail_final(self, conn, task_id: int, status: str, mensagem: str) -> bool: ...

    def release(self, conn, task_id: int) -> bool: ...

    # -- waking up and maintenance --

    def seconds_until_next_due(self, conn) -> float | None: ...

    def promote_due(self, conn, limit: int) -> int: ...

    def has_stale_pending(self, conn, wait_seconds: float) -> bool: ...

    def notify(self, conn, channel: str, payload: str = "") -> None: ...

    def try_service_lock(self, conn, key: int) -> bool: ...

    def service_unlock(self, conn, key: int) -> None: ...

    def find_orphans(
        self, conn, queue_oid: int, limit: int, check_db_locks: bool = True
    ) -> list[Task]: ...

    def purge_round(self, conn, max_age_days: int, limit: int) -> int: ...
