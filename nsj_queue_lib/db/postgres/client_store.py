"""The client's operations on a PostgreSQL queue: enqueue, read, cancel, report progress.

They accept psycopg 3 and psycopg2 connections: both speak the ``%(name)s``
parameter style and adapt lists to arrays. They run in the caller's
transaction. The worker's operations build on these (store.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg

from nsj_queue_lib.cancel_notice import cancel_payload
from nsj_queue_lib.db.columns import TASK_INSERT_FIELDS, TRACED_INSERT, query_values
from nsj_queue_lib.db.dialect import check_store_tables, notify_channel
from nsj_queue_lib.db.moved_rows import retry_moved_rows
from nsj_queue_lib.db.postgres import single_insert
from nsj_queue_lib.db.postgres.deliveries import SERVER_DELIVERABLE
from nsj_queue_lib.db.postgres.dialect import CLAIM_NOW
from nsj_queue_lib.db.postgres.errors import wrap_driver_errors
from nsj_queue_lib.db.postgres.rows import rows_as_dicts
from nsj_queue_lib.db.sql_files import load_queries, render, render_queries
from nsj_queue_lib.fleet.fair import has_fair_key
from nsj_queue_lib.fleet.overrides import has_overrides
from nsj_queue_lib.flow.dedupe import insert_deduplicated
from nsj_queue_lib.identifiers import split_table_name
from nsj_queue_lib.model import FAIR_COLUMNS, OVERRIDE_COLUMNS

_IDLE = psycopg.pq.TransactionStatus.IDLE

# From this many tasks on, insert_tasks streams them with COPY.
COPY_THRESHOLD = 100
# stream_tasks' savepoint: a task failing the checks mid-stream undoes the COPY only.
_SAVEPOINT = "SAVEPOINT nsjq_insert_tasks"
_ROLLBACK_TO_SAVEPOINT = "ROLLBACK TO SAVEPOINT nsjq_insert_tasks"
_RELEASE_SAVEPOINT = "RELEASE SAVEPOINT nsjq_insert_tasks"
# copy_tasks' columns and their types, in its order (binary COPY sends no type names);
# a traced COPY sends the trace context last.
_COPY_COLUMNS = (
    "id, origem, destino, processo, chave_externa, payload, payload_hash, "
    "tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial"
)
_COPY_TYPES = (
    "int8", "varchar", "varchar", "varchar", "varchar", "text", "bytea",
    "int8", "varchar", "bool", "int4", "timestamptz", "timestamptz",
)  # fmt: skip


_INSERT_TASKS_KEYED = """
INSERT INTO {queue_table} (
    origem, destino, processo, chave_externa, payload, payload_hash, tenant,
    grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial, trace_context,
    max_retry, timeout_s, next_try_priority, fair_key
)
SELECT
    r.origem, r.destino, r.processo, r.chave_externa, r.payload, r.payload_hash,
    r.tenant, r.grupo_empresarial, r.pub_sub, due.prioridade,
    CASE WHEN r.fair_key IS NULL OR r.data_hora IS NOT NULL THEN due.at
         ELSE least(call.now, greatest(
             (SELECT max(k.data_hora) FROM {queue_table} AS k
              WHERE k.fair_key = r.fair_key AND k.prioridade = due.prioridade
                AND k.status = 'pendente' AND k.data_hora <= call.now) + interval '1 microsecond',
             (SELECT min(h.data_hora) FROM {queue_table} AS h
              WHERE h.status = 'pendente' AND h.prioridade = due.prioridade)))
              + (row_number() OVER (
                     PARTITION BY r.fair_key, due.prioridade, r.data_hora IS NULL ORDER BY r.ord
                 ) - 1) * interval '1 microsecond'
    END,
    due.at, %(trace_context)s::varchar,
    r.max_retry, r.timeout_s, r.next_try_priority, r.fair_key
FROM unnest(
    %(origem)s::varchar[], %(destino)s::varchar[], %(processo)s::varchar[],
    %(chave_externa)s::varchar[], %(payload)s::text[], %(payload_hash)s::bytea[],
    %(tenant)s::bigint[], %(grupo_empresarial)s::varchar[], %(pub_sub)s::boolean[],
    %(prioridade)s::integer[], %(data_hora)s::timestamptz[], %(max_retry)s::integer[],
    %(timeout_s)s::float8[], %(next_try_priority)s::integer[], %(fair_key)s::varchar[]
) WITH ORDINALITY AS r(
    origem, destino, processo, chave_externa, payload, payload_hash, tenant,
    grupo_empresarial, pub_sub, prioridade, data_hora, max_retry, timeout_s,
    next_try_priority, fair_key, ord
)
CROSS JOIN LATERAL (
    SELECT coalesce(r.data_hora, clock_timestamp()) AS at,
           coalesce(r.prioridade, 50) AS prioridade
) AS due
-- One instant for the call's turns: each key's turn is the same for all its tasks of the
-- call, which the row number then spaces a microsecond apart.
CROSS JOIN (SELECT clock_timestamp() AS now) AS call
ORDER BY r.ord
RETURNING id
"""


class PostgresClientStore:
    """What a client does with a queue table (and its subscriber table) on PostgreSQL."""

    dialect = "postgres"

    def __init__(self, queue_table: str, subscriber_table: str | None = None):
        check_store_tables(queue_table, subscriber_table)
        self.queue_table = queue_table
        self.subscriber_table = subscriber_table
        values = query_values(queue_table, subscriber_table, CLAIM_NOW, SERVER_DELIVERABLE)
        # A worker's statements of unfinished rows read the hot partition alone once its
        # store knows the table is partitioned (PostgresQueueStore.bind); a client's read
        # every partition, which costs one probe each.
        self._query_values = dict(values, hot="", hot_t="")
        self.sql = render_queries("postgres", self._query_values)
        # Tasks enqueued with a trace context name its column; the plain statements never
        # do, so that a client keeps working on a table db_gen --upgrade has not reached.
        self.sql["insert_tasks_traced"] = render(
            load_queries("postgres")["insert_tasks"], {**self._query_values, **TRACED_INSERT}
        )
        # insert_tasks with overrides or fair keys (PostgreSQL only: MySQL's store builds
        # multi-row VALUES): one statement for the call, whose keyed tasks get their turns
        # (fleet/fair.py). The statement does not see its own rows: a key's n-th task of the
        # call is n - 1 microseconds after the key's turn.
        self.sql["insert_tasks_keyed"] = _INSERT_TASKS_KEYED.format(queue_table=queue_table)
        # insert_tasks' COPY path (PostgreSQL only, so not among the shared query names):
        # ids and one timestamp for the rows without data_hora, then the rows.
        # The sequence is looked up once: pg_get_serial_sequence per row cost
        # more than the rest of the reservation (about 3 us of 4 per task).
        self.sql["reserve_ids"] = (
            "WITH s AS MATERIALIZED "
            "(SELECT pg_get_serial_sequence(%(table)s, 'id')::regclass AS seq) "
            "SELECT nextval(s.seq), clock_timestamp() FROM s, generate_series(1, %(count)s)"
        )
        # Binary rows: the server skips parsing timestamps and hex bytea, the
        # client skips formatting them.
        self.sql["copy_tasks"] = f"COPY {queue_table} ({_COPY_COLUMNS}) FROM STDIN (FORMAT BINARY)"
        self.sql["copy_tasks_traced"] = (
            f"COPY {queue_table} ({_COPY_COLUMNS}, trace_context) FROM STDIN (FORMAT BINARY)"
        )
        # Where cancel requests are announced: the channel of the queue's insert trigger.
        self.cancel_channel = notify_channel(split_table_name(queue_table)[1])

    # -- client operations (psycopg 3 or psycopg2, caller's transaction) --

    def insert_task(self, conn, row: dict[str, Any]) -> int:
        if "status" not in row:
            row = {**row, "status": None}
        key = row.get("dedupe_key")
        if key is not None:
            return insert_deduplicated(
                key,
                lambda: self._insert_returning(conn, "insert_task_keyed", row),
                lambda: self._insert_returning(conn, "dedupe_holder", {"dedupe_key": key}),
            )
        keyed = (
            row.get("lock_key") is not None
            or row.get("trace_context") is not None
            or has_overrides(row)
            or has_fair_key(row)
        )
        if not keyed:
            with wrap_driver_errors("insert_task"):
                pipelined = single_insert.insert_returning_id(conn, self.sql["insert_task"], row)
            if pipelined is not None:
                return pipelined
        new_id = self._insert_returning(conn, "insert_task_keyed" if keyed else "insert_task", row)
        assert new_id is not None  # a plain INSERT ... RETURNING returns its row
        return new_id

    def insert_waiting_task(self, conn, row: dict[str, Any]) -> int:
        """``insert_task`` for a child whose parents have not all finished: its INSERT writes
        it 'aguardando'. Written 'pendente' and then updated, each child left a dead row
        version in the claim index that claims walked over until a vacuum (a 1 -> 10,000
        fan-out's children drained 1.4x as fast once vacuumed first)."""
        return self.insert_task(conn, {**row, "status": "aguardando"})

    def _insert_returning(self, conn, name: str, params: dict[str, Any]) -> int | None:
        with wrap_driver_errors(name), conn.cursor() as cur:
            cur.execute(self.sql[name], params)
            found = cur.fetchone()
            return None if found is None else int(found[0])

    def insert_tasks(self, conn, rows: Sequence[dict[str, Any]]) -> list[int]:
        """Many tasks in one statement; their ``trace_context`` is the first row's (one
        per call: the caller's)."""
        if not rows:
            return []
        columns = (*TASK_INSERT_FIELDS, "prioridade", "data_hora")
        if any(has_overrides(row) or has_fair_key(row) for row in rows):
            keyed = (*columns, *OVERRIDE_COLUMNS, *FAIR_COLUMNS)
            values: dict[str, Any] = {name: [row.get(name) for row in rows] for name in keyed}
            values["trace_context"] = rows[0].get("trace_context")
            with wrap_driver_errors("insert_tasks"), conn.cursor() as cur:
                cur.execute(self.sql["insert_tasks_keyed"], values)
                return [int(r[0]) for r in cur.fetchall()]
        if isinstance(conn, psycopg.Connection) and len(rows) >= COPY_THRESHOLD:
            return self._copy_tasks(conn, rows)
        params: dict[str, Any] = {name: [row[name] for row in rows] for name in columns}
        name = "insert_tasks"
        trace_context = rows[0].get("trace_context")
        if trace_context is not None:
            name, params["trace_context"] = "insert_tasks_traced", trace_context
        with wrap_driver_errors("insert_tasks"), conn.cursor() as cur:
            cur.execute(self.sql[name], params)
            return [int(r[0]) for r in cur.fetchall()]

    def streams(self, conn, count: int) -> bool:
        """Whether ``stream_tasks`` takes ``count`` tasks on ``conn``."""
        return isinstance(conn, psycopg.Connection) and count >= COPY_THRESHOLD

    def stream_tasks(self, conn, count: int, rows: Iterator[dict[str, Any]]) -> list[int]:
        """``count`` tasks with COPY, taken from ``rows`` as they are sent.

        ``rows`` may raise (a task that fails the client's checks): the COPY is
        abandoned and, inside a transaction, rolled back to a savepoint taken
        first, so nothing is written and the caller's transaction goes on.
        """
        # A transaction holds the COPY (the caller's, or the call's own on an autocommit
        # connection: db/own_transaction.py); outside one there is nothing to go back to.
        savepoint = not conn.autocommit or conn.info.transaction_status != _IDLE
        with wrap_driver_errors("insert_tasks"), conn.cursor(binary=True) as cur:
            if savepoint:
                cur.execute(_SAVEPOINT)
            try:
                ids = self._copy_rows(cur, count, rows)
            except BaseException:
                if savepoint and not conn.closed:
                    cur.execute(_ROLLBACK_TO_SAVEPOINT)
                    cur.execute(_RELEASE_SAVEPOINT)
                raise
            if savepoint:
                cur.execute(_RELEASE_SAVEPOINT)
            return ids

    def _copy_tasks(self, conn, rows: Sequence[dict[str, Any]]) -> list[int]:
        """Many tasks with COPY (psycopg 3): ids reserved first, then one stream of rows.

        COPY skips the per-row parameter handling of ``unnest``, which big
        batches pay for (docs/benchmarks.md).
        """
        with wrap_driver_errors("insert_tasks"), conn.cursor(binary=True) as cur:
            return self._copy_rows(cur, len(rows), iter(rows))

    def _copy_rows(self, cur, count: int, rows: Iterator[dict[str, Any]]) -> list[int]:
        cur.execute(self.sql["reserve_ids"], {"table": self.queue_table, "count": count})
        reserved = cur.fetchall()
        # The first row says whether the call has a trace context (one per call).
        first = next(rows, None)
        trace_context = None if first is None else first.get("trace_context")
        if first is not None:
            rows = itertools.chain((first,), rows)
        traced = () if trace_context is None else (trace_context,)
        with cur.copy(self.sql["copy_tasks_traced" if traced else "copy_tasks"]) as copy:
            copy.set_types((*_COPY_TYPES, "varchar") if traced else _COPY_TYPES)
            write = copy.write_row
            for (task_id, now), row in zip(reserved, rows, strict=True):
                at = row["data_hora"] or now
                write(
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
                        *traced,
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
            return rows_as_dicts(cur)

    def get_task(self, conn, task_id: int) -> dict[str, Any] | None:
        with wrap_driver_errors("get_task"), conn.cursor() as cur:
            cur.execute(self.sql["get_task"], {"id": task_id})
            rows = rows_as_dicts(cur)
            return rows[0] if rows else None

    def list_subscribers(
        self, conn, processo: str, tenant: int | None, grupo_empresarial: str | None
    ) -> list[dict[str, Any]]:
        if self.subscriber_table is None:
            raise ValueError(f"no subscriber table configured for queue {self.queue_table}")
        params = {"processo": processo, "tenant": tenant, "grupo_empresarial": grupo_empresarial}
        with wrap_driver_errors("list_subscribers"), conn.cursor() as cur:
            cur.execute(self.sql["list_subscribers"], params)
            return rows_as_dicts(cur)

    def insert_deliveries(
        self,
        conn,
        publication: dict[str, Any],
        deliveries: Sequence[tuple[Any, str | None, bytes | None]],
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
            # The fan-out's trace context (pubsub.publish).
            "trace_context": publication.get("trace_context"),
        }
        with wrap_driver_errors("insert_deliveries"), conn.cursor() as cur:
            cur.execute(self.sql["insert_deliveries"], params)
            return [int(r[0]) for r in cur.fetchall()]

    # -- a task's life cycle (docs/lifecycle.md) --

    def _one(self, conn, name: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        with wrap_driver_errors(name), conn.cursor() as cur:
            cur.execute(self.sql[name], params)
            row = cur.fetchone()
            return None if row is None else tuple(row)

    def task_view(self, conn, task_id: int, lock: bool = False) -> dict[str, Any] | None:
        """The latest attempt of the task ``task_id`` belongs to (statements see the latest
        committed rows under READ COMMITTED, so ``lock`` changes nothing here)."""
        with wrap_driver_errors("task_view"), conn.cursor() as cur:
            cur.execute(self.sql["task_view"], {"id": task_id})
            rows = rows_as_dicts(cur)
        return rows[0] if rows else None

    def end_waiter(self, conn: Any, task_id: int) -> Any:
        """A LISTEN for the task's end on ``conn`` (db/postgres/task_end.py), or None."""
        from nsj_queue_lib.db.postgres.task_end import TaskEndWaiter

        return TaskEndWaiter.on(conn, self.queue_table, (self.sql["task_view"], {"id": task_id}))

    def cancel_attempt(self, conn, attempt_id: int, mensagem: str) -> str | None:
        """Run again, under a savepoint, when the row moved to its day's partition as its
        worker settled it (the partitioned layout: ``moved_rows``)."""
        params = {"id": attempt_id, "mensagem": mensagem}
        row = retry_moved_rows(conn, lambda: self._one(conn, "cancel_attempt", params))
        return None if row is None else str(row[0])

    def notify_cancel(self, conn, attempt_id: int) -> None:
        """Tell the workers of the queue (at commit) that ``attempt_id`` is asked to stop."""
        params = {"channel": self.cancel_channel, "payload": cancel_payload(attempt_id)}
        self._one(conn, "notify", params)

    def cancel_running(self, conn, task_id: int, mensagem: str) -> bool:
        return self._one(conn, "cancel_running", {"id": task_id, "mensagem": mensagem}) is not None

    def cancel_if_requested(self, conn, task_id: int, mensagem: str) -> bool:
        params = {"id": task_id, "mensagem": mensagem}
        return self._one(conn, "cancel_if_requested", params) is not None

    def cancel_requests(self, conn, task_ids: Sequence[int]) -> list[int]:
        with wrap_driver_errors("cancel_requests"), conn.cursor() as cur:
            cur.execute(self.sql["cancel_requests"], {"ids": list(task_ids)})
            return [int(row[0]) for row in cur.fetchall()]

    def report_progress(
        self, conn, task_id: int, done: int, total: int | None, message: str | None
    ) -> bool:
        params = {"id": task_id, "done": done, "total": total, "message": message}
        with wrap_driver_errors("report_progress"), conn.cursor() as cur:
            cur.execute(self.sql["report_progress"], params)
            return cur.rowcount == 1
