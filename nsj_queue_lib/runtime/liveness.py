"""Where a running task's liveness lock lives: the database, or the socket server.

The executor claims, completes and settles failures through one of these, so
its own code is the same in both modes.

- ``DatabaseLiveness``: the claim statement takes a session advisory lock on
  the executor's connection before the claim commits; completion, unlock,
  commit and the next claim travel in one round trip.
- ``ServerLiveness`` (CLIENT_SERVER_MODE): the claim's transaction stays open
  while the socket server's lock is taken, then commits: a claimed task is
  never visible without its lock. If the server connection drops, every lock
  of this worker is gone and another worker may rescue its tasks, so success
  is written only if the row is still 'processando'; otherwise the handler's
  work is rolled back (the rescuing attempt does it again).
"""

from __future__ import annotations

import threading
from typing import Any

from nsj_queue_lib.log import get_logger

logger = get_logger("liveness")


# Names are built from the queue's identity as the database resolves it (the
# table's oid on PostgreSQL, the qualified name's hash on MySQL), never from the
# QUEUE_TABLE text: 'fila' and 'public.fila' must be the same queue.


def task_lock_name(queue_oid: int, task_id: int) -> str:
    return f"nsjq:{queue_oid}:task:{task_id}"


def service_lock_name(queue_oid: int, service: str) -> str:
    return f"nsjq:{queue_oid}:service:{service}"


class DatabaseLiveness:
    def __init__(self, store, queue_key_of):
        self.store = store
        self._queue_key_of = queue_key_of  # callable: the queue oid is known once connected

    def claim(self, conn, limit: int) -> list[dict[str, Any]]:
        return self.store.claim(conn, limit, self._queue_key_of())

    def complete_and_claim(self, conn, task: dict[str, Any], mensagem: str, keys, limit: int):
        return self.store.complete_and_claim(conn, task["id"], mensagem, keys, limit, keys[0])

    def unlock_in_transaction(self, conn, task: dict[str, Any], keys) -> None:
        self.store.unlock_task(conn, keys)

    def after_settled(self, task: dict[str, Any]) -> None:
        pass


class ServerLiveness:
    def __init__(self, store, lock_client, queue_oid_of, stop: threading.Event):
        self.store = store
        self.locks = lock_client
        self._queue_oid_of = queue_oid_of
        self._stop = stop

    def _name(self, task_id: int) -> str:
        return task_lock_name(self._queue_oid_of(), task_id)

    def _call(self, operation):
        """Run a lock-server call, reconnecting once if the connection dropped.

        The lock client takes its locks again when it reconnects, so running
        tasks keep theirs across a server restart.
        """
        from nsj_queue_lib.client.channel import ServerConnectionError

        try:
            return operation()
        except ServerConnectionError as exc:
            logger.warning("lock server connection lost (%s); reconnecting", exc)
            if not self.locks.reconnect(stop=self._stop, max_wait=30):
                raise
            return operation()

    def claim(self, conn, limit: int) -> list[dict[str, Any]]:
        tasks = self.store.claim_uncommitted(conn, limit)
        if not tasks:
            return []
        try:
            for task in tasks:
                name = self._name(task["id"])
                if not self._call(lambda name=name: self.locks.try_lock(name)):
                    raise RuntimeError(
                        f"task {task['id']}: its liveness lock is held by another client"
                    )
            self.store.commit_and_begin(conn)
        except Exception:
            # Nothing was committed: the tasks are 'pendente' again for everyone.
            self.store.rollback(conn)
            for task in tasks:
                self.after_settled(task)
            raise
        for task in tasks:
            task["liveness_locked"] = True
        return tasks

    def complete_and_claim(self, conn, task: dict[str, Any], mensagem: str, keys, limit: int):
        if self.store.complete_if_running(conn, task["id"], mensagem):
            self.store.commit(conn)
        else:
            self.store.rollback(conn)
            logger.warning(
                "task=%s: no longer 'processando' when it finished (rescued by another worker, or "
                "given back after a deadlock); its work was rolled back",
                task["id"],
            )
        self.after_settled(task)
        return self.claim(conn, limit) if limit > 0 else []

    def unlock_in_transaction(self, conn, task: dict[str, Any], keys) -> None:
        pass  # the server lock goes after the commit, in after_settled

    def after_settled(self, task: dict[str, Any]) -> None:
        try:
            self._call(lambda: self.locks.unlock(self._name(task["id"])))
        except Exception as exc:  # noqa: BLE001 - a lost connection released it anyway
            logger.info("task=%s: unlock on the lock server failed (%s)", task["id"], exc)
