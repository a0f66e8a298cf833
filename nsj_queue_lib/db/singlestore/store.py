"""The queue's operations on SingleStore, for one queue table.

The same methods as ``MysqlQueueStore`` (and ``PostgresQueueStore``), with
what SingleStore lacks done another way:
- no SKIP LOCKED: ``claim`` reads candidates without locking and wins each
  one with a conditional update (``... WHERE id = %s AND status =
  'pendente'``, autocommit): the row count tells who won;
- no named locks: liveness and maintenance locks come from the socket
  server, through ``locker`` (a ``nsj_queue_lib.client.lock_client.LockClient``
  or anything with ``try_lock(name)``, ``unlock(name)`` and ``held(names)``).
  A task's lock is taken before its conditional update, so a claimed task is
  never without its lock. Without a locker, runtime operations that need
  locks raise ``ConfigError`` (CLIENT_SERVER_MODE): a SingleStore worker
  cannot run on its own;
- no RETURNING and no consecutive AUTO_INCREMENT values: one INSERT per task;
- no deadlock detection: conflicts end as lock wait timeouts (1205), which
  are retried like on MySQL.

Lock names are the MySQL dialect's (``task_lock_name``, ``service_lock_name``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from nsj_queue_lib.db.mysql.store import (
    SINGLESTORE,
    MysqlQueueStore,
    _claimed,
    _rows_as_dicts,
    _ServerInfo,
    is_retryable,
    wrap_driver_errors,
)
from nsj_queue_lib.exceptions import ConfigError

NEEDS_SOCKET_SERVER = (
    "SingleStore has no SKIP LOCKED and no named locks (GET_LOCK): a SingleStore worker takes its "
    "locks from the socket server; set CLIENT_SERVER_MODE=true and run python -m nsj_queue_lib.server"
)
# Candidates read per claimed task: a few more than asked for, in case
# another worker wins some of them first.
CLAIM_SLACK = 4
# At most this many running rows are examined per find_orphans call, and
# lock names are asked about in groups of HELD_BATCH (one server request each).
ORPHAN_SCAN = 10_000
HELD_BATCH = 500


class TaskLocker(Protocol):
    def try_lock(self, name: str) -> bool: ...

    def unlock(self, name: str) -> bool: ...

    def held(self, names: Iterable[str]) -> set[str]: ...


class SingleStoreQueueStore(MysqlQueueStore):
    dialect = "singlestore"

    def __init__(self, queue_table: str, subscriber_table: str | None = None,
                 locker: TaskLocker | None = None):
        super().__init__(queue_table, subscriber_table)
        self.locker = locker

    def server(self, conn) -> _ServerInfo:
        return _ServerInfo(SINGLESTORE, 1)

    def _locker(self) -> TaskLocker:
        if self.locker is None:
            raise ConfigError({"CLIENT_SERVER_MODE": NEEDS_SOCKET_SERVER})
        return self.locker

    def configure_connection(self, conn) -> None:
        """Nothing to set: one isolation level, and the time zone is the cluster's."""

    # -- claim and complete --

    def claim(self, conn, limit: int, queue_key: int | None = None) -> list[dict[str, Any]]:
        """Claim up to ``limit`` ready tasks; their locks are held by ``locker``.

        ``conn`` must be autocommit: each conditional update commits at once.
        On return a transaction is open for the first task's handler, or
        ``conn`` is idle when nothing was claimed.
        """
        if limit <= 0:
            return []
        locker = self._locker()
        steps = self.sql["claim_tasks"]
        won: list[dict[str, Any]] = []
        with wrap_driver_errors("claim"), conn.cursor() as cur:
            cur.execute(steps["candidates"], {"limit": limit + CLAIM_SLACK})
            for task in _rows_as_dicts(cur):
                if len(won) == limit:
                    break
                name = self.task_lock_name(conn, task["id"])
                if not locker.try_lock(name):
                    continue  # another worker is claiming or running it
                try:
                    changed = cur.execute(steps["mark"], {"id": task["id"]})
                except Exception as exc:
                    locker.unlock(name)
                    if is_retryable(exc):
                        continue  # busy row: leave it to the next claim
                    raise
                if changed == 1:
                    won.append(task)
                else:
                    locker.unlock(name)  # someone else won it
            if not won:
                return []
            payloads = self._first_payloads(cur, won)
            conn.begin()
        return _claimed(won, payloads, {task["id"]: True for task in won})

    def complete_and_claim(
        self, conn, task_id: int, mensagem: str, keys: tuple[int, int] | None, limit: int,
        queue_key: int | None = None,
    ) -> list[dict[str, Any]]:
        """Settle a task as 'sucesso', release its lock, commit, and claim the next tasks."""
        locker = self._locker()
        name = self.task_lock_name(conn, task_id)
        unlock = lambda: locker.unlock(name)  # noqa: E731
        with wrap_driver_errors("complete_task"):
            if self._complete(conn, task_id, mensagem, unlock):
                conn.commit()
            else:
                self._give_back(conn, task_id, unlock)
        return self.claim(conn, limit) if limit > 0 else []

    def unlock_task(self, conn, keys: tuple[int, int]) -> None:
        self._locker().unlock(self.task_lock_name(conn, keys[1]))

    # -- maintenance --

    def try_service_lock(self, conn, key: int) -> bool:
        return bool(self._locker().try_lock(self.service_lock_name(conn, key)))

    def service_unlock(self, conn, key: int) -> None:
        self._locker().unlock(self.service_lock_name(conn, key))

    def find_orphans(self, conn, queue_oid: int | None, limit: int) -> list[dict[str, Any]]:
        """Running rows whose liveness lock nobody holds on the socket server (oldest first)."""
        locker = self._locker()
        steps = self.sql["find_orphans"]
        with wrap_driver_errors("find_orphans"), conn.cursor() as cur:
            cur.execute(steps["select"], {"limit": max(limit, ORPHAN_SCAN)})
            names = {self.task_lock_name(conn, row[0]): row[0] for row in cur.fetchall()}
            listed = list(names)
            held: set[str] = set()
            for start in range(0, len(listed), HELD_BATCH):
                held |= set(locker.held(listed[start:start + HELD_BATCH]))
            ids = [task_id for name, task_id in names.items() if name not in held][:limit]
            if not ids:
                return []
            cur.execute(steps["rows"], {"ids": ids})
            return _rows_as_dicts(cur)
