"""The queue's operations on PostgreSQL, for one queue table.

Client operations (insert, list) accept psycopg 3 and psycopg2 connections:
both speak the ``%(name)s`` parameter style and adapt lists to arrays.
Runtime operations are used by the worker with psycopg 3 connections only.
Driver errors leave this module as ``DatabaseError`` (the driver's error is
its ``__cause__``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.db.dialect import check_store_tables, claim_routine_name
from nsj_queue_lib.db.postgres.wire import PreparedRoundTrip, RoundTripError
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.exceptions import DatabaseError, QueueTableMissingError

_TASK_COLUMNS = ", ".join(f"t.{c}" for c in model.QUEUE_COLUMNS)
_TASK_COLUMNS_RESOLVED = ", ".join(
    "coalesce(t.payload, first_attempt.payload) AS payload" if c == "payload" else f"t.{c}"
    for c in model.QUEUE_COLUMNS
)
_SUBSCRIBER_COLUMNS = ", ".join(f"s.{c}" for c in model.SUBSCRIBER_COLUMNS)
# The claim function's rows in the claim's shape (see _CLAIM_NAMES).
_CALL_COLUMNS = ", ".join(
    "coalesce((f.task).payload, f.first_payload) AS payload" if c == "payload" else f"(f.task).{c}"
    for c in model.QUEUE_COLUMNS
)

# Keys of a task's liveness lock: (queue table oid, task id folded into 31 bits).
# Two-integer advisory locks live in a different key space from the one-bigint
# locks the maintenance services take, so the two can never collide; the
# table's oid keeps queues apart. The claim query folds ids the same way.
TASK_KEY_MODULUS = 2**31
# From this many tasks on, insert_tasks streams them with COPY.
COPY_THRESHOLD = 100


def queue_lock_key(queue_oid: int) -> int:
    """The oid as the signed int4 the two-key advisory lock functions take."""
    return queue_oid - 2**32 if queue_oid >= 2**31 else queue_oid


def task_lock_keys(queue_oid: int, task_id: int) -> tuple[int, int]:
    """The (int4, int4) pair of a task's liveness lock (``queue_oid`` may be already folded)."""
    return queue_lock_key(queue_oid), task_id % TASK_KEY_MODULUS


def _is_undefined_function(exc: BaseException | None) -> bool:
    import psycopg.errors

    return isinstance(exc, psycopg.errors.UndefinedFunction)


def _is_driver_error(exc: BaseException) -> bool:
    root = type(exc).__module__.split(".")[0]
    return root in ("psycopg", "psycopg2", "psycopg_pool")


@contextmanager
def wrap_driver_errors(what: str) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        if _is_driver_error(exc):
            raise DatabaseError(f"{what} failed: {exc}".strip()) from exc
        raise


# The claim's select list, in order (claimed_columns, then liveness_locked).
# Known in advance: reading them from cursor.description builds a Column
# object per column per claim, which cost a quarter of a worker's CPU.
_CLAIM_NAMES = (*model.QUEUE_COLUMNS, "liveness_locked")


def _claimed_rows(cursor) -> list[dict[str, Any]]:
    pgresult = cursor.pgresult
    if pgresult is None or pgresult.nfields != len(_CLAIM_NAMES):
        raise DatabaseError(f"the claim returned an unexpected result shape ({cursor.description})")
    return [dict(zip(_CLAIM_NAMES, row, strict=True)) for row in cursor.fetchall()]


def _rows_as_dicts(cursor) -> list[dict[str, Any]]:
    if cursor.description is None:
        return []
    names = [col[0] for col in cursor.description]
    rows = []
    for row in cursor.fetchall():
        item = dict(zip(names, row, strict=True))
        if isinstance(item.get("payload_hash"), memoryview):  # psycopg2 returns bytea as memoryview
            item["payload_hash"] = bytes(item["payload_hash"])
        rows.append(item)
    return rows


class PostgresQueueStore:
    def __init__(self, queue_table: str, subscriber_table: str | None = None):
        check_store_tables(queue_table, subscriber_table)
        self.queue_table = queue_table
        self.subscriber_table = subscriber_table
        self.sql = render_queries(
            "postgres",
            {
                "queue_table": queue_table,
                # The subscriber queries are only run when a table was given.
                "subscriber_table": subscriber_table or "subscriber_table_not_configured",
                "task_columns": _TASK_COLUMNS,
                "task_columns_resolved": _TASK_COLUMNS_RESOLVED,
                "claimed_columns": _TASK_COLUMNS_RESOLVED,
                "subscriber_columns": _SUBSCRIBER_COLUMNS,
            },
        )
        # insert_tasks' COPY path (PostgreSQL only, so not among the shared query names):
        # ids and one timestamp for the rows without data_hora, then the rows.
        self.sql["reserve_ids"] = (
            "SELECT nextval(pg_get_serial_sequence(%(table)s, 'id')), clock_timestamp() "
            "FROM generate_series(1, %(count)s)"
        )
        self.sql["copy_tasks"] = (
            f"COPY {queue_table} (id, origem, destino, processo, chave_externa, payload, payload_hash, "
            "tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial) FROM STDIN"
        )
        # The claim function db_gen creates next to the table (claim_function.sql):
        # complete_and_claim uses it when the database has it.
        self.claim_function = claim_routine_name(queue_table)
        self._claim_function_present: bool | None = None  # looked up on first use
        self._claim_call: PreparedRoundTrip | None = None
        if self.claim_function is not None:
            self.sql["claim_function_exists"] = "SELECT to_regprocedure(%(signature)s) IS NOT NULL"
            # Sent at the libpq level, prepared once per connection (wire.py):
            # hence $n placeholders.
            self.sql["complete_and_claim_call"] = (
                f"SELECT {_CALL_COLUMNS}, f.liveness_locked "
                f"FROM {self.claim_function}($1::bigint, $2::text, $3::integer, $4::integer, $5::integer) AS f"
            )
            self._claim_call = PreparedRoundTrip(self.sql["complete_and_claim_call"], _CLAIM_NAMES)

    # -- client operations (psycopg 3 or psycopg2, caller's transaction) --

    def insert_task(self, conn, row: dict[str, Any]) -> int:
        with wrap_driver_errors("insert_task"), conn.cursor() as cur:
            cur.execute(self.sql["insert_task"], row)
            return int(cur.fetchone()[0])

    def insert_tasks(self, conn, rows: Sequence[dict[str, Any]]) -> list[int]:
        if not rows:
            return []
        columns = (
            "origem",
            "destino",
            "processo",
            "chave_externa",
            "payload",
            "payload_hash",
            "tenant",
            "grupo_empresarial",
            "pub_sub",
            "prioridade",
            "data_hora",
        )
        if type(conn).__module__.split(".")[0] == "psycopg" and len(rows) >= COPY_THRESHOLD:
            return self._copy_tasks(conn, rows)
        arrays = {name: [row[name] for row in rows] for name in columns}
        with wrap_driver_errors("insert_tasks"), conn.cursor() as cur:
            cur.execute(self.sql["insert_tasks"], arrays)
            return [int(r[0]) for r in cur.fetchall()]

    def _copy_tasks(self, conn, rows: Sequence[dict[str, Any]]) -> list[int]:
        """Many tasks with COPY (psycopg 3): ids reserved first, then one stream of rows.

        About 1.5x the array insert for big batches: COPY skips the per-row
        parameter handling of ``unnest``.
        """
        with wrap_driver_errors("insert_tasks"), conn.cursor() as cur:
            cur.execute(self.sql["reserve_ids"], {"table": self.queue_table, "count": len(rows)})
            reserved = cur.fetchall()
            with cur.copy(self.sql["copy_tasks"]) as copy:
                for (task_id, now), row in zip(reserved, rows, strict=True):
                    at = row["data_hora"] or now
                    copy.write_row(
                        (
                            task_id,
                            row["origem"],
                            row["destino"],
                            row["processo"],
                            row["chave_externa"],
                            row["payload"],
                            row["payload_hash"],
                            row["tenant"],
                            row["grupo_empresarial"],
                            row["pub_sub"],
                            50 if row["prioridade"] is None else row["prioridade"],
                            at,
                            at,
                        )
                    )
        return [int(task_id) for task_id, _ in reserved]

    def list_equivalent(
        self, conn, chave_externa: str | None, payload_hash: bytes | None, statuses: Sequence[str]
    ) -> list[dict[str, Any]]:
        params = {
            "chave_externa": chave_externa,
            "payload_hash": payload_hash,
            "statuses": list(statuses),
        }
        with wrap_driver_errors("list_equivalent"), conn.cursor() as cur:
            cur.execute(self.sql["list_equivalent"], params)
            return _rows_as_dicts(cur)

    def get_task(self, conn, task_id: int) -> dict[str, Any] | None:
        with wrap_driver_errors("get_task"), conn.cursor() as cur:
            cur.execute(self.sql["get_task"], {"id": task_id})
            rows = _rows_as_dicts(cur)
            return rows[0] if rows else None

    def list_subscribers(
        self, conn, processo: str, tenant: int | None, grupo_empresarial: str | None
    ) -> list[dict[str, Any]]:
        if self.subscriber_table is None:
            raise ValueError(f"no subscriber table configured for queue {self.queue_table}")
        params = {"processo": processo, "tenant": tenant, "grupo_empresarial": grupo_empresarial}
        with wrap_driver_errors("list_subscribers"), conn.cursor() as cur:
            cur.execute(self.sql["list_subscribers"], params)
            return _rows_as_dicts(cur)

    def insert_deliveries(
        self, conn, publication: dict[str, Any], deliveries: Sequence[tuple[str, str, bytes | None]]
    ) -> list[int]:
        """Insert one task per (subscriber id, payload, payload hash) for a publication."""
        params = {
            "origem": publication["origem"],
            "destino": publication["destino"],
            "processo": publication["processo"],
            "chave_externa": publication["chave_externa"],
            "tenant": publication["tenant"],
            "grupo_empresarial": publication["grupo_empresarial"],
            "prioridade": publication["prioridade"],
            "publication_id": publication["id"],
            "subscriber_ids": [d[0] for d in deliveries],
            "payloads": [d[1] for d in deliveries],
            "payload_hashes": [d[2] for d in deliveries],
        }
        with wrap_driver_errors("insert_deliveries"), conn.cursor() as cur:
            cur.execute(self.sql["insert_deliveries"], params)
            return [int(r[0]) for r in cur.fetchall()]

    # -- runtime operations (psycopg 3) --

    def configure_connection(self, conn) -> None:
        """Once per worker connection: nothing to set on PostgreSQL."""

    def configure_executor_connection(self, conn) -> None:
        """Once per executor connection: nothing to set on PostgreSQL (READ COMMITTED, its default)."""

    def task_lock_keys(self, queue_oid: int, task_id: int) -> tuple[int, int]:
        return task_lock_keys(queue_oid, task_id)

    def queue_oid(self, conn) -> int:
        try:
            with wrap_driver_errors("queue_oid"):
                return int(
                    conn.execute(self.sql["queue_oid"], {"table": self.queue_table}).fetchone()[0]
                )
        except DatabaseError as exc:
            import psycopg.errors

            if isinstance(
                exc.__cause__, (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)
            ):
                raise QueueTableMissingError(
                    f"table {self.queue_table} does not exist"
                ) from exc.__cause__
            raise

    # Executor connections are autocommit: transactions are opened and closed
    # with explicit statements, so that ending one task, claiming the next and
    # opening the next task's transaction travel in a single pipeline (one
    # round trip per task). psycopg's commit() would force a sync of its own.

    def _queue_claim(self, conn, limit: int, queue_key: int):
        """Queue, in an open pipeline: claim in a transaction of its own, then open the task's."""
        control = conn.cursor()
        control.execute("BEGIN")
        control.execute(self.sql["claim_settings"])
        cursor = conn.cursor()
        cursor.execute(
            self.sql["claim_tasks"],
            {"limit": limit, "queue_key": queue_key, "take_db_lock": True},
            binary=True,
        )
        # Transaction-local settings end with the claim's transaction; AND CHAIN opens the task's.
        control.execute("COMMIT AND CHAIN")
        return cursor

    def claim_uncommitted(self, conn, limit: int) -> list[dict[str, Any]]:
        """Claim without database locks and leave the claim's transaction open.

        For liveness locks held elsewhere (the socket server): the caller takes
        them, then commits with ``commit_and_begin``, or rolls back to return
        the tasks to the queue. Until then nobody sees the rows claimed.
        """
        with wrap_driver_errors("claim"):
            with conn.pipeline():
                conn.execute("BEGIN")
                conn.execute(self.sql["claim_settings"])
                cursor = conn.cursor()
                cursor.execute(
                    self.sql["claim_tasks"],
                    {"limit": limit, "queue_key": 0, "take_db_lock": False},
                    binary=True,
                )
            tasks = _claimed_rows(cursor)
            if not tasks:
                conn.execute("ROLLBACK")
            return tasks

    def commit_and_begin(self, conn) -> None:
        with wrap_driver_errors("commit"):
            with conn.pipeline():
                conn.execute("COMMIT")
                conn.execute("BEGIN")

    def complete_if_running(self, conn, task_id: int, mensagem: str) -> bool:
        """Write 'sucesso' in the open transaction; False when the row is no longer 'processando'."""
        with wrap_driver_errors("complete_task"):
            row = conn.execute(
                self.sql["complete_task"], {"id": task_id, "mensagem": mensagem}
            ).fetchone()
        return row is not None

    def claim(self, conn, limit: int, queue_key: int) -> list[dict[str, Any]]:
        """Claim up to ``limit`` ready tasks, taking their liveness locks on ``conn``.

        ``conn`` (autocommit) is the connection that will run the tasks. On
        return a transaction is open for the first task's handler, or, when
        nothing was claimed, ``conn`` is idle.
        """
        with wrap_driver_errors("claim"):
            with conn.pipeline():
                cursor = self._queue_claim(conn, limit, queue_key)
            return self._claimed(conn, cursor)

    def complete_and_claim(
        self, conn, task_id: int, mensagem: str, keys: tuple[int, int], limit: int, queue_key: int
    ) -> list[dict[str, Any]]:
        """Settle a task as 'sucesso', release its lock, claim the next tasks, commit.

        One round trip and one commit: the next claim runs in the finished
        task's transaction, so if that commit fails the claim is undone with it
        (its rows stay 'pendente'; the locks it took are released here).
        ``limit`` 0 only completes.
        """
        if self._has_claim_function(conn):
            tasks = self._call_claim_function(conn, task_id, mensagem, keys, limit, queue_key)
        else:
            tasks = self._complete_then_claim(conn, task_id, mensagem, keys, limit, queue_key)
        if limit <= 0:
            return []
        if not tasks:
            conn.execute("ROLLBACK")  # the empty transaction opened for a task
        return tasks

    def _call_claim_function(
        self, conn, task_id: int, mensagem: str, keys: tuple[int, int], limit: int, queue_key: int
    ) -> list[dict[str, Any]]:
        """Completion, unlock and claim in one call of the claim function, then the commit."""
        params = (task_id, mensagem, keys[0], keys[1], limit)
        # AND CHAIN: the next task's transaction opens in the same statement.
        commit = b"COMMIT AND CHAIN" if limit > 0 else b"COMMIT"
        with wrap_driver_errors("complete_task"):
            try:
                assert self._claim_call is not None, "only called when the function exists"
                return self._claim_call.run(conn, params, commit)
            except RoundTripError as exc:
                self._unlock_uncommitted_claim(conn, exc.rows, queue_key)
                if _is_undefined_function(exc.error):
                    # Dropped (or replaced) while the worker runs: look again on the next task,
                    # so the fallback takes over instead of failing every task.
                    self._claim_function_present = None
                raise exc.error from None

    def _complete_then_claim(
        self, conn, task_id: int, mensagem: str, keys: tuple[int, int], limit: int, queue_key: int
    ) -> list[dict[str, Any]]:
        """A queue without the claim function: completion + unlock, claim, commit in one pipeline."""
        params = {"id": task_id, "mensagem": mensagem, "queue_key": keys[0], "task_key": keys[1]}
        claim = {"limit": limit, "queue_key": queue_key, "take_db_lock": True}
        cursor = None
        try:
            with wrap_driver_errors("complete_task"):
                with conn.pipeline():
                    # One cursor for the statements whose results are not read.
                    control = conn.cursor()
                    control.execute(self.sql["complete_and_unlock"], params)
                    if limit > 0:
                        cursor = conn.cursor()
                        # Binary: no timestamp text formatting on either side.
                        cursor.execute(self.sql["claim_tasks"], claim, binary=True)
                    control.execute("COMMIT AND CHAIN" if limit > 0 else "COMMIT")
        except DatabaseError:
            if cursor is not None:
                try:
                    claimed = _claimed_rows(cursor)
                except Exception:  # noqa: BLE001 - the claim never ran: it took no lock
                    claimed = []
                self._unlock_uncommitted_claim(conn, claimed, queue_key)
            raise
        return _claimed_rows(cursor) if cursor is not None else []

    def _has_claim_function(self, conn) -> bool:
        """Whether the database has this queue's claim function (queues made before it existed do not)."""
        if self._claim_function_present is None:
            present = False
            if self.claim_function is not None:
                signature = f"{self.claim_function}(bigint,text,integer,integer,integer)"
                with wrap_driver_errors("claim_function_exists"):
                    present = bool(
                        conn.execute(
                            self.sql["claim_function_exists"], {"signature": signature}
                        ).fetchone()[0]
                    )
            self._claim_function_present = present
        return self._claim_function_present

    def _unlock_uncommitted_claim(
        self, conn, claimed: list[dict[str, Any]], queue_key: int
    ) -> None:
        """A claim whose commit failed: its rows are 'pendente' again, so its locks must go too.

        Best effort: when the connection is broken its locks went with it.
        """
        for task in claimed:
            if task.get("liveness_locked"):
                try:
                    self.unlock_task(conn, task_lock_keys(queue_key, task["id"]))
                except DatabaseError:
                    return

    def _claimed(self, conn, cursor) -> list[dict[str, Any]]:
        tasks = _claimed_rows(cursor)
        if not tasks:
            conn.execute("ROLLBACK")  # the empty transaction opened for a task
        return tasks

    def seconds_until_next_due(self, conn) -> float | None:
        with wrap_driver_errors("next_due"):
            return conn.execute(self.sql["next_due"]).fetchone()[0]

    # Transaction control on autocommit connections (executor, admin).

    def begin(self, conn) -> None:
        with wrap_driver_errors("begin"):
            conn.execute("BEGIN")

    def commit(self, conn) -> None:
        with wrap_driver_errors("commit"):
            conn.execute("COMMIT")

    def rollback(self, conn) -> None:
        with wrap_driver_errors("rollback"):
            conn.execute("ROLLBACK")

    def terminate_session(self, admin_conn, victim_conn) -> None:
        """End another connection's server session (its transaction rolls back, its locks go)."""
        with wrap_driver_errors("terminate_session"):
            admin_conn.execute("SELECT pg_terminate_backend(%s)", (victim_conn.info.backend_pid,))

    def unlock_task(self, conn, keys: tuple[int, int]) -> None:
        with wrap_driver_errors("unlock_task"):
            conn.execute(self.sql["unlock_task"], {"queue_key": keys[0], "task_key": keys[1]})

    def fail_and_retry(
        self, conn, task_id: int, status: str, mensagem: str, delay_seconds: float
    ) -> int | None:
        params = {
            "id": task_id,
            "status": status,
            "mensagem": mensagem,
            "delay_seconds": delay_seconds,
        }
        with wrap_driver_errors("fail_and_retry"):
            row = conn.execute(self.sql["fail_and_retry"], params).fetchone()
        return None if row is None else int(row[0])

    def fail_and_bury(
        self, conn, task_id: int, status: str, mensagem: str, payload: str | None
    ) -> int | None:
        params = {"id": task_id, "status": status, "mensagem": mensagem, "payload": payload}
        with wrap_driver_errors("fail_and_bury"):
            row = conn.execute(self.sql["fail_and_bury"], params).fetchone()
        return None if row is None else int(row[0])

    def fail_final(self, conn, task_id: int, status: str, mensagem: str) -> bool:
        params = {"id": task_id, "status": status, "mensagem": mensagem}
        with wrap_driver_errors("fail_final"):
            return conn.execute(self.sql["fail_final"], params).fetchone() is not None

    def release(self, conn, task_id: int) -> bool:
        with wrap_driver_errors("release_task"):
            return conn.execute(self.sql["release_task"], {"id": task_id}).rowcount == 1

    def try_service_lock(self, conn, key: int) -> bool:
        with wrap_driver_errors("try_service_lock"):
            return bool(conn.execute(self.sql["try_service_lock"], {"key": key}).fetchone()[0])

    def service_unlock(self, conn, key: int) -> None:
        with wrap_driver_errors("service_unlock"):
            conn.execute(self.sql["service_unlock"], {"key": key})

    def find_orphans(
        self, conn, queue_oid: int, limit: int, check_db_locks: bool = True
    ) -> list[dict[str, Any]]:
        """'processando' rows nobody is settling, row-locked until the transaction ends.

        With ``check_db_locks`` False only the row locks are considered and the
        caller asks the socket server about the liveness locks.
        """
        params = {"queue_oid": queue_oid, "limit": limit, "check_db_locks": check_db_locks}
        with wrap_driver_errors("find_orphans"), conn.cursor() as cur:
            cur.execute(self.sql["find_orphans"], params)
            return _rows_as_dicts(cur)

    def promote_due(self, conn, limit: int) -> int:
        with wrap_driver_errors("promote_due"):
            return conn.execute(self.sql["promote_due"], {"limit": limit}).rowcount

    def has_stale_pending(self, conn, wait_seconds: float) -> bool:
        with wrap_driver_errors("count_stale_pending"):
            row = conn.execute(
                self.sql["count_stale_pending"], {"wait_seconds": wait_seconds}
            ).fetchone()
        return row[0] > 0

    def notify(self, conn, channel: str, payload: str = "") -> None:
        with wrap_driver_errors("notify"):
            conn.execute(self.sql["notify"], {"channel": channel, "payload": payload})

    def purge_round(self, conn, max_age_days: int, limit: int) -> int:
        params = {"max_age_days": max_age_days, "limit": limit}
        with wrap_driver_errors("purge"):
            return conn.execute(self.sql["purge"], params).rowcount
