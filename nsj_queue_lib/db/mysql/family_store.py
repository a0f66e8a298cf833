"""What MySQL, MariaDB and SingleStore stores share: PyMySQL, the same SQL shapes.

Client operations (insert, list) run in the caller's transaction on any
PyMySQL connection. Worker operations expect autocommit connections whose
sessions the driver set up (``db/mysql/driver.py``): the store opens and ends
transactions with explicit statements. Driver errors leave as
``DatabaseError`` with the driver's error as ``__cause__``.

A naive ``data_hora`` given to an insert is read in the session's time zone;
an aware one is stored as that exact instant.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from nsj_queue_lib.db.columns import TASK_INSERT_FIELDS, query_values
from nsj_queue_lib.db.dialect import check_store_tables, missing_columns_error
from nsj_queue_lib.db.latest_attempt import VIEW, lock_latest
from nsj_queue_lib.db.mysql import galera
from nsj_queue_lib.db.mysql.claim_where import PAUSE_CLOCK
from nsj_queue_lib.db.mysql.deliveries import SERVER_DELIVERABLE
from nsj_queue_lib.db.mysql.dialect import TASK_JSON
from nsj_queue_lib.db.mysql.errors import (
    ER_LOCK_DEADLOCK,
    RETRY_ATTEMPTS,
    RETRYABLE_ERRORS,
    error_code,
    logger,
    retry_on_lock_errors,
    wrap_driver_errors,
)
from nsj_queue_lib.db.mysql.keyed_rows import (
    MICROSECOND,
    SINGLESTORE_FAIR,
    keyed_value,
    prioridade_of,
    stamped,
)
from nsj_queue_lib.db.mysql.lock_keys import lock_key_free
from nsj_queue_lib.db.mysql.names import (
    MARIADB,
    SINGLESTORE,
    ServerInfo,
    qualified_table,
    server_info,
    stable_queue_number,
)
from nsj_queue_lib.db.mysql.rows import (
    InsertValues,
    due_sql,
    insert_batches,
    normalize,
    rows_as_dicts,
    split_steps,
)
from nsj_queue_lib.db.mysql.successes import success_sql
from nsj_queue_lib.db.sql_files import render_queries
from nsj_queue_lib.db.tally import FoldResult
from nsj_queue_lib.exceptions import DatabaseError, QueueTableMissingError
from nsj_queue_lib.fleet.fair import has_fair_key
from nsj_queue_lib.fleet.overrides import has_overrides
from nsj_queue_lib.flow.dedupe import insert_deduplicated
from nsj_queue_lib.identifiers import split_table_name
from nsj_queue_lib.workflow import dependencies

# What completing a task in its own transaction came to (see _complete).
COMPLETED, NOT_RUNNING, LOST = "completed", "not running", "lost"

SERVER_STATUS_IN_TRANS = 1  # a reply's status flag (pymysql.constants.SERVER_STATUS)
ER_BAD_FIELD_ERROR = 1054  # unknown column
# A duplicate key: only the dedupe index is unique besides the auto-increment id.
ER_DUP_ENTRY = 1062


class MysqlFamilyStore:
    dialect: ClassVar[str] = "mysql"
    claim_recheck_seconds: float | None = None  # each "nothing" comes from a look-up

    def __init__(self, queue_table: str, subscriber_table: str | None = None):
        check_store_tables(queue_table, subscriber_table)
        self.queue_table = queue_table
        self.subscriber_table = subscriber_table
        self._query_values = {
            **query_values(
                queue_table, subscriber_table, "NOW(6)", SERVER_DELIVERABLE, PAUSE_CLOCK
            ),
            # The socket-server claim's lock_key condition: the claim procedure's.
            "lock_key_free": lock_key_free(queue_table, "t", "NOW(6)"),
            "task_json": TASK_JSON,
            # A plain table's: no pins to a hot partition (db/mysql/layout.py).
            "hot": "",
            "hot_t": "",
            "finished_day_set": "",
        }
        self.sql = self._render_queries(self._query_values)
        # Known once bound (MysqlQueueStore): whether the table is partitioned.
        self.partitioned = False
        self._table_schema = split_table_name(queue_table)[0]
        self._queue_number: int | None = None
        self.handled_subscribers: frozenset[str] | None = None
        self.handled_processos: frozenset[str] | None = None
        self.worker_name: str | None = None

    def _render_queries(self, values: dict[str, str]) -> dict[str, dict[str, str]]:
        queries = render_queries(self.dialect, values)
        return {name: split_steps(text) for name, text in queries.items()}

    def set_handled_subscribers(self, handled: frozenset[str] | None) -> None:
        """The subscribers whose deliveries this store's claims take (None: all of them;
        nsj_queue_lib/flow/deliveries.py)."""
        self.handled_subscribers = handled

    def set_handled_processos(self, handled: frozenset[str] | None) -> None:
        """The processos whose tasks this store's claims take (None: all of them)."""
        self.handled_processos = handled

    def set_worker_name(self, worker: str | None) -> None:
        """The name the claims write in each attempt's ``worker`` column."""
        self.worker_name = worker

    def server(self, conn: Any) -> ServerInfo:
        """The server flavour behind ``conn`` (MariaDB, MySQL or SingleStore)."""
        return server_info(conn)

    # -- client operations (any PyMySQL connection, caller's transaction) --

    def insert_task(self, conn: Any, row: dict[str, Any]) -> int:
        key = row.get("dedupe_key")
        overridden = has_overrides(row) or has_fair_key(row)
        if key is None and row.get("lock_key") is None and not overridden:
            return self.insert_tasks(conn, [row], what="insert_task")[0]
        if self.dialect == "singlestore" and has_fair_key(row):
            raise ValueError(SINGLESTORE_FAIR)
        if self.dialect == "singlestore" and (key is not None or row.get("lock_key") is not None):
            raise ValueError(
                "dedupe_key and lock_key are not supported on SingleStore (no unique key "
                "without the shard key; its claim does not look at lock keys)"
            )
        if key is None:
            new_id = self._insert_keyed(conn, row)
            assert new_id is not None  # no dedupe_key: no duplicate
            return new_id
        return insert_deduplicated(
            key, lambda: self._insert_keyed(conn, row), lambda: self._dedupe_holder(conn, key)
        )

    def _insert_keyed(self, conn: Any, row: dict[str, Any]) -> int | None:
        """The new task's id, or None when an unfinished task holds its dedupe_key."""
        turn = self._fair_turn(conn, row) if stamped(row) else None
        try:
            return self._insert_rows(
                conn, "insert_task", self.sql["insert_task_keyed"], [keyed_value(row, turn)]
            )[0]
        except DatabaseError as exc:
            if error_code(exc.__cause__) == ER_DUP_ENTRY:
                return None
            raise

    def _insert_keyed_rows(self, conn: Any, rows: Sequence[dict[str, Any]]) -> list[int]:
        """Tasks with fair keys or overrides (no dedupe_key, no lock_key) in multi-row
        INSERTs: each fair key's turn is read once per call and prioridade, and the key's
        n-th task of the call gets the n-th microsecond after it (fleet/fair.py)."""
        if self.dialect == "singlestore" and any(has_fair_key(row) for row in rows):
            raise ValueError(SINGLESTORE_FAIR)
        turns: dict[tuple[str, int], Any] = {}
        values = []
        for row in rows:
            turn = None
            if stamped(row):
                group = (row["fair_key"], prioridade_of(row))
                if group in turns:
                    turn = turns[group] = turns[group] + MICROSECOND
                else:
                    turn = turns[group] = self._fair_turn(conn, row)
            values.append(keyed_value(row, turn))
        return self._insert_rows(conn, "insert_tasks", self.sql["insert_task_keyed"], values)

    def _fair_turn(self, conn: Any, row: dict[str, Any]) -> decimal.Decimal:
        """The turn of a task with a fair key: seconds since 1970, a Decimal exact to the
        microsecond (fleet/fair.py)."""
        params = {"fair_key": row["fair_key"], "prioridade": prioridade_of(row)}
        self._know_layout(conn)  # its reads of ready tasks, pinned to them
        return decimal.Decimal(self._fetch(conn, "fair_turn", params)[0]["turn"])

    def _dedupe_holder(self, conn: Any, key: str) -> int | None:
        self._know_layout(conn)
        found = self._fetch(conn, "dedupe_holder", {"dedupe_key": key})
        return int(found[0]["id_inicial"]) if found else None

    def insert_tasks(
        self, conn: Any, rows: Sequence[dict[str, Any]], what: str = "insert_tasks"
    ) -> list[int]:
        """Many tasks; their ``trace_context`` is the first row's (one per call: the
        caller's). With one, the keyed insert's columns (all but it NULL): the plain insert
        never names it, so that a client keeps working on a table db_gen --upgrade has not
        reached yet."""
        if not rows:
            return []
        if any(has_fair_key(row) or has_overrides(row) for row in rows):
            return self._insert_keyed_rows(conn, rows)
        trace_context = rows[0].get("trace_context")
        traced = (
            () if trace_context is None else (None, None, trace_context, None, None, None, None)
        )
        values = []
        for row in rows:
            due, due_args = due_sql(row.get("data_hora"))
            args = [row[name] for name in TASK_INSERT_FIELDS]
            args.append(row.get("prioridade"))
            values.append(
                (
                    f"(%s, %s, %s, %s, %s, %s, %s, %s, %s, COALESCE(%s, 50), {due}, {due}"
                    + (", %s, %s, %s, %s, %s, %s, %s)" if traced else ")"),
                    [*args, *due_args, *due_args, *traced],
                )
            )
        sql = self.sql["insert_task_keyed" if traced else what]
        return self._insert_rows(conn, what, sql, values)

    def _insert_rows(
        self, conn: Any, what: str, sql: dict[str, str], values: list[InsertValues]
    ) -> list[int]:
        """Multi-row INSERTs (as few as the size budget allows); the new ids in VALUES order."""
        with wrap_driver_errors(what):
            info = self.server(conn)
            if info.flavour == SINGLESTORE:
                # SingleStore's AUTO_INCREMENT values are unique but not
                # consecutive: one row per statement, each id read back.
                batches = [[value] for value in values]
            else:
                batches = list(insert_batches(values))
            ids: list[int] = []
            with conn.cursor() as cur:
                for batch in batches:
                    text = sql["head"] + "\n" + ",\n".join(v[0] for v in batch)
                    args = [a for v in batch for a in v[1]]
                    if info.flavour == MARIADB:
                        cur.execute(text + "\n" + sql["returning"], args)
                        ids.extend(int(r[0]) for r in cur.fetchall())
                    else:
                        cur.execute(text, args)
                        first = int(cur.lastrowid)
                        ids.extend(first + n * info.increment for n in range(len(batch)))
            return ids

    def list_equivalent(
        self,
        conn: Any,
        chave_externa: str | None,
        payload_hash: bytes | None,
        statuses: Sequence[str],
    ) -> list[dict[str, Any]]:
        params = {
            "chave_externa": chave_externa,
            "payload_hash": payload_hash,
            "statuses": list(statuses),
        }
        return self._fetch(conn, "list_equivalent", params)

    def get_task(self, conn: Any, task_id: int) -> dict[str, Any] | None:
        rows = self._fetch(conn, "get_task", {"id": task_id})
        return rows[0] if rows else None

    def list_subscribers(
        self, conn: Any, processo: str, tenant: int | None, grupo_empresarial: str | None
    ) -> list[dict[str, Any]]:
        if self.subscriber_table is None:
            raise ValueError(f"no subscriber table configured for queue {self.queue_table}")
        params = {"processo": processo, "tenant": tenant, "grupo_empresarial": grupo_empresarial}
        return self._fetch(conn, "list_subscribers", params)

    def insert_deliveries(
        self,
        conn: Any,
        publication: dict[str, Any],
        deliveries: Sequence[tuple[Any, str | None, bytes | None]],
    ) -> list[int]:
        """Insert one task per (subscriber id, payload, payload hash) for a publication."""
        if not deliveries:
            return []
        common = [
            publication["origem"],
            publication["destino"],
            publication["processo"],
            publication["chave_externa"],
            publication["tenant"],
            publication["grupo_empresarial"],
            publication["prioridade"],
            publication["id"],
        ]
        # The fan-out's trace context (pubsub.publish).
        trace_context = publication.get("trace_context")
        values = [
            (
                "(%s, %s, %s, %s, %s, %s, COALESCE(%s, 50), %s, %s, %s, %s, %s)",
                [*common, sid, payload, digest, trace_context],
            )
            for sid, payload, digest in deliveries
        ]
        return self._insert_rows(conn, "insert_deliveries", self.sql["insert_deliveries"], values)

    def _fetch(
        self, conn: Any, name: str, params: dict[str, Any] | None = None, step: str = "sql"
    ) -> list[dict[str, Any]]:
        with wrap_driver_errors(name), conn.cursor() as cur:
            cur.execute(self.sql[name][step], params)
            return rows_as_dicts(cur)

    def _run(
        self, conn: Any, name: str, params: dict[str, Any] | None = None, step: str = "sql"
    ) -> int:
        """Execute one statement; its row count."""
        with wrap_driver_errors(name), conn.cursor() as cur:
            count: int = cur.execute(self.sql[name][step], params)
            return count

    # -- a task's life cycle (docs/lifecycle.md) --

    def end_waiter(self, conn: Any, task_id: int) -> None:
        """No push here: wait_for_task polls (MySQL/MariaDB have no NOTIFY)."""
        return None

    def task_view(self, conn: Any, task_id: int, lock: bool = False) -> dict[str, Any] | None:
        """The latest attempt of the task ``task_id`` belongs to; with ``lock``, read with
        locking reads (the latest committed rows, whatever the caller's snapshot)."""
        if not lock:
            rows = self._fetch(conn, "task_view", {"id": task_id})
            return rows[0] if rows else None
        self._know_layout(conn)
        with wrap_driver_errors("task_view"), conn.cursor() as cur:
            row = lock_latest(cur, "mysql", self.queue_table, self.partitioned, task_id, VIEW)
        return None if row is None else normalize(row)

    def _know_layout(self, conn: Any) -> None:
        """Where a table can be partitioned (MysqlQueueStore), a client's store learns its
        layout before a statement by task id; SingleStore's tables are plain."""

    def cancel_attempt(self, conn: Any, attempt_id: int, mensagem: str) -> str | None:
        self._know_layout(conn)
        steps = self.sql["cancel_attempt"]
        params = {"id": attempt_id, "mensagem": mensagem}
        with wrap_driver_errors("cancel_attempt"), conn.cursor() as cur:
            if cur.execute(steps["mark"], params) != 1:
                return None
            cur.execute(steps["status"], params)
            return str(cur.fetchone()[0])

    def notify_cancel(self, conn: Any, attempt_id: int) -> None:
        """Nothing: these databases have no NOTIFY (each worker polls its running tasks)."""

    def cancel_running(self, conn: Any, task_id: int, mensagem: str) -> bool:
        return self._run(conn, "cancel_running", {"id": task_id, "mensagem": mensagem}) == 1

    def cancel_if_requested(self, conn: Any, task_id: int, mensagem: str) -> bool:
        steps = self.sql["cancel_if_requested"]
        params = {"id": task_id, "mensagem": mensagem}
        with wrap_driver_errors("cancel_if_requested"), conn.cursor() as cur:
            cur.execute(steps["lock"], params)
            row = cur.fetchone()
            if row is None or not row[0]:
                return False
            return bool(cur.execute(steps["mark"], params) == 1)

    def cancel_requests(self, conn: Any, task_ids: Sequence[int]) -> list[int]:
        if not task_ids:
            return []
        rows = self._fetch(conn, "cancel_requests", {"ids": list(task_ids)})
        return [int(row["id"]) for row in rows]

    def report_progress(
        self, conn: Any, task_id: int, done: int, total: int | None, message: str | None
    ) -> bool:
        params = {"id": task_id, "done": done, "total": total, "message": message}
        return self._run(conn, "report_progress", params) == 1

    # -- the queue's identity --

    @property
    def queue_number(self) -> int:
        if self._queue_number is None:
            raise RuntimeError(f"{self.queue_table}: bind() has not run on a connection yet")
        return self._queue_number

    def bind(self, conn: Any) -> int:
        """A stable number for the queue (MySQL has no oid); fails when the table is missing."""
        schema, table = split_table_name(self.queue_table)
        with wrap_driver_errors("queue_oid"), conn.cursor() as cur:
            cur.execute(self.sql["queue_oid"]["sql"], {"schema": schema, "table": table})
            found = cur.fetchone()[0]
        if not found:
            raise QueueTableMissingError(f"table {self.queue_table} does not exist")
        try:
            self._run(conn, "lifecycle_columns")
        except DatabaseError as exc:
            cause = exc.__cause__
            if cause is not None and error_code(cause) == ER_BAD_FIELD_ERROR:
                raise missing_columns_error(self.queue_table, cause) from cause
            raise
        self._queue_number = stable_queue_number(qualified_table(self.queue_table, conn))
        return self._queue_number

    # -- transaction control on autocommit connections (executor, admin) --

    def begin(self, conn: Any) -> None:
        with wrap_driver_errors("begin"):
            conn.begin()

    def commit(self, conn: Any) -> None:
        with wrap_driver_errors("commit"):
            conn.commit()

    def rollback(self, conn: Any) -> None:
        with wrap_driver_errors("rollback"):
            galera.rollback(conn)  # a 1213 answering ROLLBACK: rolled back already

    def in_transaction(self, conn: Any) -> bool:
        # The server reports it in every reply's status flags.
        return bool(conn.server_status & SERVER_STATUS_IN_TRANS)

    def rollback_and_begin(self, conn: Any) -> None:
        with wrap_driver_errors("rollback"):
            conn.rollback()
            conn.begin()

    def commit_and_begin(self, conn: Any) -> None:
        """Commit and open the next transaction in one statement."""
        with wrap_driver_errors("commit"), conn.cursor() as cur:
            cur.execute("COMMIT AND CHAIN")

    def _first_payloads(self, cur: Any, row: dict[str, Any]) -> dict[int, str | None]:
        """A claimed later attempt's payload, which only its first attempt keeps."""
        if row["payload"] is not None or row["id_inicial"] is None:
            return {}
        cur.execute(self.sql["claim_tasks"]["first_payloads"], {"ids": [row["id_inicial"]]})
        return dict(cur.fetchall())

    # -- settling a task --

    def complete_if_running(
        self, conn: Any, task_id: int, mensagem: str, first_id: int | None = None
    ) -> bool:
        """Write 'sucesso' in the open transaction; False when the row is no longer 'processando'.
        ``first_id`` (the task's first attempt's id, if known) finds its children without
        reading the row the success moved. Lock wait timeouts are retried. After a deadlock
        (the handler's work is already rolled back) the task goes back to 'pendente' to run
        again and the answer is False: nothing of this attempt was committed."""
        with wrap_driver_errors("complete_task"):
            outcome = self._complete(conn, task_id, mensagem, first_id)
            if outcome is LOST:
                self._give_back(conn, task_id, lambda: None)
            return outcome is COMPLETED

    def _complete(self, conn: Any, task_id: int, mensagem: str, first_id: int | None = None) -> str:
        """UPDATE 'sucesso' in the handler's transaction, retried after lock wait timeouts.

        COMPLETED, NOT_RUNNING (the row is no longer 'processando'), or LOST:
        a deadlock, or timeouts to the last try, rolled the work back.
        """
        sql = success_sql(conn, self.queue_table, [(task_id, mensagem)], self.partitioned)
        with conn.cursor() as cur:
            for number in range(1, RETRY_ATTEMPTS + 1):
                try:
                    if cur.execute(sql) != 1:
                        return NOT_RUNNING
                    return self._release_children(conn, task_id, first_id)
                except Exception as exc:
                    code = error_code(exc)
                    if code not in RETRYABLE_ERRORS:
                        raise
                    if code == ER_LOCK_DEADLOCK or number == RETRY_ATTEMPTS:
                        logger.warning(
                            "task=%s: %s while completing; the task goes back to the queue",
                            task_id,
                            exc,
                        )
                        return LOST
        return LOST  # pragma: no cover

    def _release_children(self, conn: Any, task_id: int, first_id: int | None) -> str:
        """The children waiting for the task just written 'sucesso', released in this
        transaction (nsj_queue_lib/workflow/): every completion outside the claim procedure
        comes here. COMPLETED, or LOST when a deadlock or lock wait timeout hit it."""
        try:
            dependencies.after_successes(self, conn, [task_id], [first_id] if first_id else None)
        except DatabaseError as exc:
            if error_code(exc.__cause__) not in RETRYABLE_ERRORS:
                raise
            logger.warning(
                "task=%s: %s while releasing its children; the task goes back to the queue",
                task_id,
                exc,
            )
            return LOST
        return COMPLETED

    def _give_back(self, conn: Any, task_id: int, unlock: Callable[[], None]) -> None:
        """After a lost completion: roll back, return the task to the queue, release its lock."""

        def attempt() -> None:
            conn.rollback()
            conn.begin()
            with conn.cursor() as cur:
                cur.execute(self.sql["release_task"]["sql"], {"id": task_id})
            unlock()
            conn.commit()

        retry_on_lock_errors("complete_task (giving the task back)", attempt, conn.rollback)

    def _fail(self, conn: Any, name: str, params: dict[str, Any]) -> int | None:
        """Mark the attempt failed; when it was still 'processando', insert the row that
        follows it."""
        steps = self.sql[name]
        with wrap_driver_errors(name), conn.cursor() as cur:
            if cur.execute(steps["mark"], params) != 1:
                return None
            cur.execute(steps["insert"], params)
            return int(cur.lastrowid)

    def fail_and_retry(
        self,
        conn: Any,
        task_id: int,
        status: str,
        mensagem: str,
        delay_seconds: float,
        counted: bool = True,
    ) -> int | None:
        delay_us = max(0, round(delay_seconds * 1_000_000))
        params = {
            "id": task_id,
            "status": status,
            "mensagem": mensagem,
            "delay_us": delay_us,
            "attempt_step": int(counted),
        }
        return self._fail(conn, "fail_and_retry", params)

    def fail_and_bury(
        self, conn: Any, task_id: int, status: str, mensagem: str, payload: str | None
    ) -> int | None:
        params = {"id": task_id, "status": status, "mensagem": mensagem, "payload": payload}
        return self._fail(conn, "fail_and_bury", params)

    def fail_final(self, conn: Any, task_id: int, status: str, mensagem: str) -> bool:
        params = {"id": task_id, "status": status, "mensagem": mensagem}
        return self._run(conn, "fail_final", params) == 1

    def worker_seen(self, conn: Any, worker: str, processos: str | None) -> None:
        self._run(conn, "worker_seen", {"worker": worker, "processos": processos})

    def worker_left(self, conn: Any, worker: str) -> None:
        self._run(conn, "worker_left", {"worker": worker})

    def release(self, conn: Any, task_id: int) -> bool:
        return self._run(conn, "release_task", {"id": task_id}) == 1

    # -- maintenance --

    def seconds_until_next_due(self, conn: Any) -> float | None:
        with wrap_driver_errors("next_due"), conn.cursor() as cur:
            cur.execute(self.sql["next_due"]["sql"])
            value = cur.fetchone()[0]
        return None if value is None else float(value)

    def promote_due(self, conn: Any, limit: int) -> int:
        steps = self.sql["promote_due"]
        with wrap_driver_errors("promote_due"), conn.cursor() as cur:
            cur.execute(steps["select"], {"limit": limit})
            ids = [row[0] for row in cur.fetchall()]
            promoted: int = cur.execute(steps["mark"], {"ids": ids}) if ids else 0
            return promoted

    def has_stale_pending(self, conn: Any, wait_seconds: float) -> bool:
        wait_us = max(0, round(wait_seconds * 1_000_000))
        with wrap_driver_errors("count_stale_pending"), conn.cursor() as cur:
            cur.execute(self.sql["count_stale_pending"]["sql"], {"wait_us": wait_us})
            return bool(cur.fetchone()[0] > 0)

    def notify(self, conn: Any, channel: str, payload: str = "") -> None:
        """Nothing: these databases have no NOTIFY (workers poll, or the socket server
        wakes them)."""

    def fold_counts(self, conn: Any, max_age_days: int) -> FoldResult | None:
        return None  # the tally's tables are made on MySQL/MariaDB only (store.py)

    def purge_round(self, conn: Any, max_age_days: int, limit: int, sides: Any = None) -> int:
        steps = self.sql["purge"]
        with wrap_driver_errors("purge"), conn.cursor() as cur:
            cur.execute(steps["select"], {"max_age_days": max_age_days, "limit": limit})
            rows = cur.fetchall()
            ids = [row[0] for row in rows]
            deleted: int = cur.execute(steps["delete"], {"ids": ids}) if ids else 0
        # A row the delete skipped (settled again meanwhile) leaves its task alive: the
        # side purge looks the first attempts up again after the delete.
        if sides is not None and deleted:
            sides.tasks(conn, [row[1] for row in rows])
        return deleted
