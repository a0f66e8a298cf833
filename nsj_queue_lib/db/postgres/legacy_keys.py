"""nsj-queue-lib 1.2.2's task keys, held next to ours while both fleets serve a queue.

A 1.2.2 worker runs a task while its session holds ``pg_advisory_lock(id)``
(one bigint: the task's id), and its retry thread rescues every 'processando'
row whose key it can take. This library's tasks hold a two-int4 key instead
(store.py), which 1.2.2 never looks at. In compatibility mode a worker also
holds the 1.2.2 key of each task it runs, and its retry service leaves alone
the rows whose 1.2.2 key is held (docs/upgrading.md):

- the claim takes both keys before it commits; when a 1.2.2 worker holds the
  task's key already (it may have read the row as 'pendente' and will run it),
  the claim rolls back and the task is left to it;
- the 1.2.2 key goes only after the task's outcome committed: 1.2.2's retry
  thread overwrites a row it finds 'processando' without checking its status,
  so it must not get the key while the outcome is still uncommitted.

1.2.2's maintenance threads lock the keys 1, 2 and 3 (retry, purge,
notify), which are also the keys of a table's first three tasks. 1.2.2's
own workers take them for those tasks, and so does compatibility mode: a task
left without its key would be rescued by 1.2.2's retry thread while it runs.
No service of this library ever takes them (runtime/service.py).

The claim routine and the table are untouched: a queue in compatibility mode
has the same DDL as any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nsj_queue_lib.db.postgres.store import PostgresQueueStore, wrap_driver_errors
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.model import Claim, TaskRecord

logger = get_logger("compat")

# An index only 1.2.2's db_gen creates (this library's never does, and
# --upgrade keeps it): the mark of a table that came from 1.2.2.
LEGACY_INDEX_SUFFIX = "_status_tentativa_data_hora"

_HAS_LEGACY_INDEX = """
SELECT EXISTS (
    SELECT 1 FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
    WHERE i.indrelid = %(table)s::regclass
      AND c.relname = 'idx_' || (SELECT relname FROM pg_class WHERE oid = %(table)s::regclass)
                      || %(suffix)s
)
"""
# Both keys of a task just claimed (its claim not committed yet).
_HOLD_CLAIMED = """
SELECT pg_try_advisory_lock(%(queue_key)s, %(task_key)s), pg_try_advisory_lock(%(id)s::bigint)
"""
_UNLOCK_BOTH = """
SELECT pg_advisory_unlock(%(queue_key)s, %(task_key)s), pg_advisory_unlock(%(id)s::bigint)
"""
# The 1.2.2 keys of a batch of rows; the ids whose key this session now holds.
_HOLD_MANY = "SELECT id FROM unnest(%(ids)s::bigint[]) AS id WHERE pg_try_advisory_lock(id)"
_UNLOCK_MANY = "SELECT pg_advisory_unlock(id) FROM unnest(%(ids)s::bigint[]) AS id"


def came_from_1_2_2(conn: Any, queue_table: str) -> bool:
    """Whether 1.2.2's db_gen created ``queue_table`` (its own index is still there)."""
    with wrap_driver_errors("compat_detect"):
        row = conn.execute(
            _HAS_LEGACY_INDEX, {"table": queue_table, "suffix": LEGACY_INDEX_SUFFIX}
        ).fetchone()
    return bool(row[0])


class PostgresLegacyKeys:
    """A worker's claims, completions and rescues with 1.2.2's keys held too."""

    def __init__(self, store: PostgresQueueStore):
        self.store = store

    def _params(self, task_id: int) -> dict[str, Any]:
        return {
            "queue_key": self.store.queue_key,
            "task_key": self.store.task_key(task_id),
            "id": task_id,
        }

    def claim(self, conn: Any) -> Claim | None:
        """Claim the next ready task with both keys held; None when none is ready, or when a
        1.2.2 worker holds the task's key (it is left to that worker)."""
        task = self.store.claim_uncommitted(conn)
        if task is None:
            return None
        try:
            with wrap_driver_errors("claim"):
                ours, legacy = conn.execute(_HOLD_CLAIMED, self._params(task.id)).fetchone()
            if legacy:
                self.store.commit_and_begin(conn)
                return Claim(task, bool(ours))
        except BaseException:
            self._undo_claim(conn, task)
            raise
        self._undo_claim(conn, task)
        logger.debug("task=%s: a nsj-queue-lib 1.2.2 worker holds it; left to it", task.id)
        return None

    def _undo_claim(self, conn: Any, task: TaskRecord) -> None:
        """Roll the claim back (the row is 'pendente' again), then drop whichever key it took."""
        try:
            self.store.rollback(conn)
            self.unlock(conn, task.id)
        except Exception:  # noqa: BLE001 - a broken connection released its locks already
            pass

    def complete(self, conn: Any, task_id: int, mensagem: str) -> None:
        """'sucesso' and commit, then both keys go: one round trip."""
        with wrap_driver_errors("complete_task"), conn.pipeline():
            conn.execute(self.store.sql["complete_task"], {"id": task_id, "mensagem": mensagem})
            conn.execute("COMMIT")
            conn.execute(_UNLOCK_BOTH, self._params(task_id))

    def unlock(self, conn: Any, task_id: int) -> None:
        """Both keys of a task whose outcome committed (or that was never claimed)."""
        with wrap_driver_errors("unlock_task"):
            conn.execute(_UNLOCK_BOTH, self._params(task_id))

    def hold(self, conn: Any, ids: Sequence[int]) -> set[int]:
        """Take the 1.2.2 keys of ``ids``; the ids held now (a key held elsewhere is missing)."""
        if not ids:
            return set()
        with wrap_driver_errors("compat_hold"):
            rows = conn.execute(_HOLD_MANY, {"ids": list(ids)})
            return {int(row[0]) for row in rows}

    def release(self, conn: Any, ids: Sequence[int]) -> None:
        if ids:
            with wrap_driver_errors("compat_release"):
                conn.execute(_UNLOCK_MANY, {"ids": list(ids)})
