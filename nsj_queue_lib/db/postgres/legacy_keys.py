"""nsj-queue-lib 1.2.2's task keys, held next to ours while both fleets serve a queue.

A 1.2.2 worker runs a task while its session holds ``pg_advisory_lock(id)``
(one bigint: the task's id), and its retry thread rescues every 'processando'
row whose key it can take. This library's tasks hold a two-int4 key instead
(store.py), which 1.2.2 never looks at. In compatibility mode a worker also
holds the 1.2.2 key of each task it runs, and its retry service leaves alone
the rows whose 1.2.2 key is held (docs/upgrading.md):

- the claim takes both keys before it commits; when a 1.2.2 worker holds the
  task's key already (it may have read the row as 'pendente' and will run it),
  the claim is undone in its own transaction and the task is left to it;
- the 1.2.2 key goes only after the task's outcome committed: 1.2.2's retry
  thread overwrites a row it finds 'processando' without checking its status,
  so it must not get the key while the outcome is still uncommitted. After a
  success it goes in the executor's next round trip (no extra one).

1.2.2's maintenance threads lock the keys 1, 2 and 3 (retry, purge,
notify), which are also the keys of a table's first three tasks. 1.2.2's
own workers take them for those tasks, and so does compatibility mode: a task
left without its key would be rescued by 1.2.2's retry thread while it runs.
No service of this library ever takes them (runtime/service.py).

The claim routine and the table are untouched: a queue in compatibility mode
has the same DDL as any other.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from nsj_queue_lib.db.postgres.errors import wrap_driver_errors
from nsj_queue_lib.db.postgres.store import PostgresQueueStore
from nsj_queue_lib.db.postgres.wire import PreparedRoundTrip, RoundTripError
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
# After the claim function claimed a task ($1; our key taken, not committed
# yet): take its 1.2.2 key, or, when a 1.2.2 worker holds it, undo the claim in
# this same transaction (the row stays 'pendente' for that worker, our key $2,
# $3 goes). Also releases $4, the 1.2.2 key of a task an earlier round trip
# committed. Prepared once per connection and sent with the commit (wire.py).
# Each CTE runs once; a plain one only when the main query reads it.
_HOLD_OR_UNDO = """
WITH legacy AS MATERIALIZED (SELECT pg_try_advisory_lock($1::bigint) AS held),
released AS MATERIALIZED (
    SELECT CASE WHEN $4::bigint IS NULL THEN NULL ELSE pg_advisory_unlock($4::bigint) END AS r
),
undone AS (
    UPDATE {table} SET status = 'pendente', started_at = NULL, worker = NULL
    WHERE id = $1::bigint AND NOT (SELECT held FROM legacy)
    RETURNING pg_advisory_unlock($2::integer, $3::integer)
)
SELECT (SELECT held FROM legacy) AS held, (SELECT count(*) FROM undone) AS undone,
       (SELECT r FROM released) AS released
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
    """A worker's claims, completions and rescues with 1.2.2's keys held too.

    A task that succeeded keeps its 1.2.2 key until the executor's next round
    trip (the next claim's, or the commit when nothing was claimed): after its
    commit, at no extra round trip. A 'sucesso' row's key is harmless, since
    1.2.2 looks only at 'pendente' and 'processando' rows.
    """

    def __init__(self, store: PostgresQueueStore):
        self.store = store
        self._hold_or_undo = PreparedRoundTrip(
            _HOLD_OR_UNDO.format(table=store.queue_table), ("held", "undone", "released")
        )
        # Per executor connection: the 1.2.2 key of a task already committed.
        self._release_later: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    def _params(self, task_id: int) -> dict[str, Any]:
        return {
            "queue_key": self.store.queue_key,
            "task_key": self.store.task_key(task_id),
            "id": task_id,
        }

    def claim(self, conn: Any) -> Claim | None:
        return self.complete_and_claim(conn, None, None, claim_next=True)

    def complete_and_claim(
        self, conn: Any, done_id: int | None, mensagem: str | None, claim_next: bool
    ) -> Claim | None:
        """``done_id`` becomes 'sucesso' and the next task is claimed with both keys, then all
        of it commits: two round trips. None when no task is ready, or when a 1.2.2 worker
        holds the next task's key (the task is left to that worker)."""
        rows = self.store.claim_call(
            conn, done_id, mensagem, 1 if claim_next else 0, None, begin=done_id is None
        )
        claimed = rows[0] if rows else None
        earlier = self._release_later.pop(conn, None)
        try:
            if claimed is None:
                self._commit_and_release(conn, [i for i in (earlier, done_id) if i is not None])
                return None
            held = self._hold_and_commit(conn, int(claimed["id"]), earlier)
        except BaseException:
            self._release_quietly(conn, None if claimed is None else int(claimed["id"]), earlier)
            raise
        if not held:
            self.store.rollback(conn)  # the empty transaction chained for the task
            self.release(conn, [] if done_id is None else [done_id])
            logger.debug(
                "task=%s: a nsj-queue-lib 1.2.2 worker holds it; left to it", claimed["id"]
            )
            return None
        if done_id is not None:
            self._release_later[conn] = done_id
        locked = bool(claimed.pop("liveness_locked"))
        return Claim(TaskRecord.from_row(claimed), locked)

    def _hold_and_commit(self, conn: Any, task_id: int, earlier: int | None) -> bool:
        """Hold (or undo) the claimed task's 1.2.2 key, release ``earlier``'s, commit and
        open the task's transaction: one round trip. Whether the key is held."""
        params = (task_id, self.store.queue_key, self.store.task_key(task_id), earlier)
        with wrap_driver_errors("claim"):
            try:
                [row] = self._hold_or_undo.run(conn, params, b"COMMIT AND CHAIN")
            except RoundTripError as exc:
                raise exc.error from None
        return bool(row["held"])

    def _commit_and_release(self, conn: Any, ids: list[int]) -> None:
        self.store.commit(conn)
        self.release(conn, ids)

    def _release_quietly(self, conn: Any, task_id: int | None, earlier: int | None) -> None:
        """After a failed round trip: roll back, then drop the keys of the claimed task and
        the earlier task's 1.2.2 key (advisory unlocks are not transactional)."""
        try:
            if self.store.in_transaction(conn):
                self.store.rollback(conn)
            if task_id is not None:
                self.unlock(conn, task_id)
            if earlier is not None:
                self.release(conn, [earlier])
        except Exception:  # noqa: BLE001 - a broken connection released its locks already
            pass

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
