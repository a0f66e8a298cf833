"""The queue's operations on SingleStore, for one queue table.

The same methods as ``MysqlQueueStore`` (and ``PostgresQueueStore``), with
what SingleStore lacks done another way:
- no SKIP LOCKED: ``claim_uncommitted`` reads candidates without locking and
  wins each with a conditional update (``... WHERE id = %s AND status =
  'pendente'``) in the claim's transaction: the row count tells who won; a
  worker racing for the same row waits for that transaction and then finds
  it claimed;
- no named locks (GET_LOCK): liveness and maintenance locks come from the
  socket server (CLIENT_SERVER_MODE=true, the runtime's ``ServerLiveness``
  and its lock client). The operations that would take database locks
  (``claim``, ``complete_and_claim``, ``unlock_task``, ``try_service_lock``,
  ``service_unlock``, ``find_orphans`` with ``check_db_locks``) raise
  ``ConfigError`` naming CLIENT_SERVER_MODE: a SingleStore worker cannot run
  on its own;
- no RETURNING and no consecutive AUTO_INCREMENT values: one INSERT per task;
- no deadlock detection: conflicts end as lock wait timeouts (1205), which
  are retried like on MySQL;
- no COMMIT AND CHAIN: ``commit_and_begin`` is two statements.

Times are DATETIME(6) in the cluster's time zone (one per cluster).
"""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.db.mysql.store import (
    SINGLESTORE,
    MysqlQueueStore,
    _claimed,
    _rows_as_dicts,
    _ServerInfo,
    retry_on_lock_errors,
    wrap_driver_errors,
)
from nsj_queue_lib.exceptions import ConfigError

NEEDS_SOCKET_SERVER = (
    "SingleStore has no SKIP LOCKED and no named locks (GET_LOCK): a SingleStore worker takes its "
    "locks from the socket server; set CLIENT_SERVER_MODE=true and run python -m nsj_queue_lib.server"
)
# Candidates read per claim beyond the limit, in case another worker wins
# some of them first.
CLAIM_SLACK = 4


def needs_socket_server() -> ConfigError:
    return ConfigError({"CLIENT_SERVER_MODE": NEEDS_SOCKET_SERVER})


class SingleStoreQueueStore(MysqlQueueStore):
    dialect = "singlestore"

    def server(self, conn) -> _ServerInfo:
        return _ServerInfo(SINGLESTORE, 1)

    def configure_connection(self, conn) -> None:
        """Nothing to set: one isolation level, and the time zone is the cluster's."""

    def configure_executor_connection(self, conn) -> None:
        """Nothing to set, as for every other connection."""

    # -- claim (client/server mode) --

    def claim_uncommitted(self, conn, limit: int) -> list[dict[str, Any]]:
        """Claim by conditional updates and leave the claim's transaction open.

        The caller takes the tasks' locks on the socket server, then commits
        with ``commit_and_begin``, or rolls back to return them to the queue.
        """
        if limit <= 0:
            return []
        steps = self.sql["claim_tasks"]

        def attempt() -> list[dict[str, Any]]:
            conn.begin()
            won: list[dict[str, Any]] = []
            with conn.cursor() as cur:
                cur.execute(steps["candidates"], {"limit": limit + CLAIM_SLACK})
                for task in _rows_as_dicts(cur):
                    if len(won) == limit:
                        break
                    if cur.execute(steps["mark"], {"id": task["id"]}) == 1:
                        won.append(task)  # else another worker won it first
                if not won:
                    conn.rollback()
                    return []
                payloads = self._first_payloads(cur, won)
            return _claimed(won, payloads, {})

        with wrap_driver_errors("claim"):
            tasks = retry_on_lock_errors("claim", attempt, conn.rollback)
        for task in tasks:
            task.pop("liveness_locked", None)
        return tasks

    def commit_and_begin(self, conn) -> None:
        with wrap_driver_errors("commit"):
            conn.commit()
            conn.begin()

    def find_orphans(
        self, conn, queue_oid: int | None, limit: int, check_db_locks: bool = True
    ) -> list[dict[str, Any]]:
        """'processando' rows, oldest first; the caller asks the socket server which are held.

        Nothing is row-locked (SingleStore has no SKIP LOCKED): settling them
        relies on the conditional updates of fail_and_retry / fail_and_bury /
        fail_final.
        """
        if check_db_locks:
            raise needs_socket_server()
        steps = self.sql["find_orphans"]
        with wrap_driver_errors("find_orphans"), conn.cursor() as cur:
            cur.execute(steps["select"], {"limit": limit})
            ids = [row[0] for row in cur.fetchall()]
            if not ids:
                return []
            cur.execute(steps["rows"], {"ids": ids})
            return _rows_as_dicts(cur)

    # -- what needs database locks --

    def claim(self, conn, limit: int, queue_key: int | None = None) -> list[dict[str, Any]]:
        raise needs_socket_server()

    def complete_and_claim(
        self, conn, task_id: int, mensagem: str, keys, limit: int, queue_key: int | None = None
    ) -> list[dict[str, Any]]:
        raise needs_socket_server()

    def unlock_task(self, conn, keys) -> None:
        raise needs_socket_server()

    def try_service_lock(self, conn, key: int) -> bool:
        raise needs_socket_server()

    def service_unlock(self, conn, key: int) -> None:
        raise needs_socket_server()
