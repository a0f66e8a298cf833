"""The rows of an in-memory queue, behind the store methods the library's own code calls.

``QueueClient`` (through ``MemoryConnection``), the pub/sub fan-out and the
executor's ``record_failure`` run unchanged on a ``MemoryStore``: the same
checks, the same envelopes and the same failure bookkeeping as on a database.
Rows are dicts with the queue table's columns; times are aware datetimes on
the store's clock, which only moves when told to.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.testing.steps import MemorySteps

Row = dict[str, Any]
UTC = datetime.timezone.utc
# What every attempt, retry, dead letter and delivery copies from the row it follows.
_COPIED: tuple[str, ...] = (
    "origem",
    "destino",
    "processo",
    "chave_externa",
    "tenant",
    "grupo_empresarial",
    "trace_context",
)


class MemoryConnection:
    """Stands in for ``bd_conn`` and for the connection a ``QueueClient`` is built on.

    Outside a handler, what a client inserts is in the queue at once (as if its
    transaction committed). Inside one, inserts wait for the handler's outcome:
    kept when it succeeds, dropped when it fails, as a rollback would. It runs
    no SQL.
    """

    def __init__(self, store: MemoryStore, staged: list[Row] | None = None) -> None:
        self._store = store
        self._staged = staged

    def _nsj_client_store(self, queue_table: str, subscriber_table: str | None) -> MemoryStore:
        return self._store

    def stage(self, row: Row) -> int:
        """Insert ``row`` now, or when the handler succeeds; its id either way."""
        if self._staged is None:
            return self._store.add(row)
        self._staged.append(row)
        return self._store.number(row)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "an InMemoryQueue connection runs no SQL: give run() a bd_conn of your own "
            "for handlers that query a database"
        )

    def commit(self) -> None:
        """Nothing to do: see the class docstring."""

    def rollback(self) -> None:
        """Nothing to do: see the class docstring."""


class MemoryStore:
    queue_table = "in_memory"
    subscriber_table = "in_memory_subscriber"

    def __init__(self, now: datetime.datetime) -> None:
        self.now = now
        self.rows: dict[int, Row] = {}
        self.subscribers: list[Row] = []
        self._next_id = 1
        # Told the id of a running attempt whose cancel was requested (InMemoryQueue).
        self.on_cancel_requested: Callable[[int], None] = lambda attempt_id: None
        self.periodic_slots: dict[str, datetime.datetime] = {}  # processo -> latest enqueued
        # Durable steps' checkpoints and the events sent to tasks (testing/steps.py).
        self.steps = MemorySteps(self)

    # -- rows --

    def number(self, row: Row) -> int:
        """Give ``row`` the next id (a dropped row leaves a gap, as a sequence does)."""
        row["id"] = self._next_id
        self._next_id += 1
        return self._next_id - 1

    def add(self, row: Row) -> int:
        self.rows[self.number(row)] = row
        return row["id"]

    def keep(self, rows: Sequence[Row]) -> None:
        """Rows a handler inserted, now that it succeeded."""
        for row in rows:
            self.rows[row["id"]] = row

    def new_row(self, **columns: Any) -> Row:
        row: Row = dict.fromkeys(model.CLAIMED_COLUMNS)
        row.update(
            tentativa=1,
            status=model.PENDENTE,
            reenfileirado=False,
            estouro_tentativas=False,
            pub_sub=False,
            dead=False,
            prioridade=model.DEFAULT_PRIORITY,
        )
        row.update(columns)
        if row["prioridade"] is None:
            row["prioridade"] = model.DEFAULT_PRIORITY
        if row["data_hora"] is None:
            row["data_hora"] = self.now
        elif row["data_hora"].tzinfo is None:  # naive: UTC, the clock's zone
            row["data_hora"] = row["data_hora"].replace(tzinfo=UTC)
        row["data_hora_inicial"] = row["data_hora_inicial"] or row["data_hora"]
        return row

    def resolved(self, row: Row) -> Row:
        """A copy of ``row`` with the first attempt's payload when it has none (later attempts)."""
        copy = dict(row)
        if copy["payload"] is None and copy["id_inicial"] in self.rows:
            copy["payload"] = self.rows[copy["id_inicial"]]["payload"]
        return copy

    # -- ClientStore --

    def insert_task(self, conn: MemoryConnection, row: Row) -> int:
        return self.insert_tasks(conn, [row])[0]

    def insert_tasks(self, conn: MemoryConnection, rows: Sequence[Row]) -> list[int]:
        return [conn.stage(self.new_row(**given)) for given in rows]

    def list_equivalent(
        self,
        conn: MemoryConnection,
        chave_externa: str | None,
        payload_hash: bytes | None,
        statuses: Sequence[str],
    ) -> list[Row]:
        return [
            dict(r)
            for r in self.rows.values()
            if r["chave_externa"] == chave_externa
            and r["payload_hash"] == payload_hash
            and r["status"] in statuses
        ]

    def get_task(self, conn: MemoryConnection, task_id: int) -> Row | None:
        row = self.rows.get(task_id)
        return None if row is None else self.resolved(row)

    def task_view(self, conn: MemoryConnection, task_id: int, lock: bool = False) -> Row | None:
        """The latest attempt of the task ``task_id`` belongs to (``QueueClient.get_task``)."""
        row = self.rows.get(task_id)
        if row is None:
            return None
        first = row["id_inicial"] or row["id"]
        attempts = [r for r in self.rows.values() if r["id"] == first or r["id_inicial"] == first]
        latest: Row = dict.fromkeys(model.LIFECYCLE_COLUMNS)  # progress: none reported
        latest.update(max(attempts, key=lambda r: r["id"]), id_inicial=first)
        latest["cancel_requested"] = bool(latest["cancel_requested"])
        return latest

    def cancel_attempt(self, conn: MemoryConnection, attempt_id: int, mensagem: str) -> str | None:
        """As the queue table's statement: a waiting attempt becomes 'cancelada', a running
        one keeps running with its request recorded; None for a finished one."""
        row = self.rows.get(attempt_id)
        if row is None or row["status"] not in model.ACTIVE_STATUSES:
            return None
        row["cancel_requested"] = True
        if row["status"] != model.PROCESSANDO:
            row.update(status=model.CANCELADA, mensagem=mensagem)
        return str(row["status"])

    def notify_cancel(self, conn: MemoryConnection, attempt_id: int) -> None:
        """The running attempt is asked to stop at once (a worker hears it within 2 s)."""
        self.on_cancel_requested(attempt_id)

    def list_subscribers(
        self, conn: MemoryConnection, processo: str, tenant: int | None, grupo: str | None
    ) -> list[Row]:
        return sorted(
            (
                dict(s)
                for s in self.subscribers
                if s["processo"] == processo
                and s["ativo"]
                and s["tenant"] in (None, tenant)
                and s["grupo_empresarial"] in (None, grupo)
            ),
            key=lambda s: str(s["id"]),
        )

    def insert_deliveries(
        self,
        conn: MemoryConnection,
        publication: Row,
        deliveries: Sequence[tuple[Any, str | None, bytes | None]],
    ) -> list[int]:
        rows = [
            dict(
                {c: publication[c] for c in _COPIED},
                prioridade=publication["prioridade"],
                publication_id=publication["id"],
                subscriber_id=subscriber_id,
                payload=payload,
                payload_hash=digest,
            )
            for subscriber_id, payload, digest in deliveries
        ]
        return self.insert_tasks(conn, rows)

    # -- what record_failure calls (WorkerStore) --

    def fail_and_retry(
        self,
        conn: Any,
        task_id: int,
        status: str,
        mensagem: str,
        delay_seconds: float,
        counted: bool = True,
    ) -> int | None:
        failed = self._settle(task_id, status, mensagem)
        if failed is None:
            return None
        failed["reenfileirado"] = True
        failed["proxima_tentativa"] = self.now + datetime.timedelta(seconds=delay_seconds)
        kept = _COPIED + ("payload_hash", "pub_sub", "publication_id", "subscriber_id")
        kept += ("dead", "live_id")
        retry = self.new_row(
            **{c: failed[c] for c in kept},
            prioridade=failed["prioridade"],
            id_inicial=failed["id_inicial"] or failed["id"],
            data_hora_inicial=failed["data_hora_inicial"],
            data_hora=failed["proxima_tentativa"],
            tentativa=failed["tentativa"] + int(counted),
            status=model.AGENDADA,
            id_anterior=failed["id"],
            data_hora_anterior=failed["data_hora"],
            status_anterior=failed["status"],
            mensagem_anterior=failed["mensagem"],
        )
        return self.add(retry)

    def fail_and_bury(
        self, conn: Any, task_id: int, status: str, mensagem: str, payload: str | None
    ) -> int | None:
        failed = self._settle(task_id, status, mensagem, estouro_tentativas=True)
        if failed is None:
            return None
        kept = _COPIED + ("payload_hash", "pub_sub", "publication_id", "subscriber_id")
        kept += ("prioridade",)
        dead = self.new_row(
            **{c: failed[c] for c in kept},
            payload=payload,
            dead=True,
            live_id=failed["id_inicial"] or failed["id"],
        )
        return self.add(dead)

    def fail_final(self, conn: Any, task_id: int, status: str, mensagem: str) -> bool:
        return self._settle(task_id, status, mensagem, estouro_tentativas=True) is not None

    def cancel_running(self, conn: Any, task_id: int, mensagem: str) -> bool:
        return self._settle(task_id, model.CANCELADA, mensagem) is not None

    def cancel_if_requested(self, conn: Any, task_id: int, mensagem: str) -> bool:
        row = self.rows.get(task_id)
        if row is None or not row.get("cancel_requested"):
            return False
        return self.cancel_running(conn, task_id, mensagem)

    def _settle(self, task_id: int, status: str, mensagem: str, **more: Any) -> Row | None:
        row = self.rows.get(task_id)
        if row is None or row["status"] != model.PROCESSANDO:
            return None
        row.update(status=status, mensagem=mensagem, **more)
        return row
